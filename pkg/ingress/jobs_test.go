package ingress_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/scheduler/apiv1/schedulerpb"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler/cloudschedulertest"
	"github.com/runonce/runonce/pkg/ticks"
)

// jobsFile is the jobs file of the job API's tests: a job every ten minutes, a job
// without a schedule.
const jobsFile = `{"jobs": {"every": {"schedule": "*/10 * * * *", "missed_after": "2m"}, "plain": {}}}`

// scheduleBackends are the setups the job API is tested on: each in-process backend,
// on the test's clock, and PostgreSQL when TEST_DATABASE_URL is set.
func scheduleBackends() []struct {
	name string
	opts setupOpts
} {
	var out []struct {
		name string
		opts setupOpts
	}
	for i, b := range backends {
		out = append(out, struct {
			name string
			opts setupOpts
		}{b.name, setupOpts{backend: i}})
	}
	for _, b := range serviceBackends() {
		if b.name == "postgres" {
			out = append(out, struct {
				name string
				opts setupOpts
			}{b.name, setupOpts{open: b.open}})
		}
	}
	return out
}

// scheduledSetup is an ingress with the jobs of file and its book, operators everyone,
// a namespace of its own, its clock at the start of a ten-minute slot plus a minute
// (returned).
func scheduledSetup(t *testing.T, o setupOpts, file string, book *ticks.BookOptions, cfg func(*ingress.Config)) (*bundle, time.Time) {
	t.Helper()
	js, err := jobs.Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if book == nil {
		book = &ticks.BookOptions{}
	}
	book.Logger = slog.New(slog.DiscardHandler)
	bk, err := ticks.NewBook(t.Context(), js, book)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	o.namespace = "jobs-" + uuid.NewString()[:8]
	o.cfg = func(c *ingress.Config) {
		c.Operators, c.Schedules, c.AcceptAnyJob, c.Jobs = auth.None{}, bk, false, jobs.Names(js)
		if cfg != nil {
			cfg(c)
		}
	}
	b := setup(t, o)
	slot := time.Now().UTC().Truncate(10 * time.Minute)
	b.now.Add(time.Until(slot.Add(time.Minute)))
	return b, slot
}

// ticksOf gets the audit of path's query and returns its JSON.
func ticksOf(t *testing.T, b *bundle, job string, q url.Values) (int, api.TicksJSON, string) {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/jobs/"+job+"/ticks?"+q.Encode(), nil, "")
	raw, _ := json.Marshal(r.body)
	var out api.TicksJSON
	if r.status == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
	}
	errText, _ := r.body["error"].(string)
	return r.status, out, errText
}

func window(from, to time.Time) url.Values {
	return url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
}

func statuses(ts []api.TickJSON) []string {
	var out []string
	for _, t := range ts {
		out = append(out, string(t.Status))
	}
	return out
}

// TestTickAudit: GET /v1/jobs/{job}/ticks gives every expected tick of the window its
// status (the run of a scheduler delivery, missing, pending), lists a keyed run apart,
// pages with a token, and refuses what it cannot answer with the reason.
func TestTickAudit(t *testing.T) {
	t.Parallel()
	for _, be := range scheduleBackends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b, slot := scheduledSetup(t, be.opts, jobsFile, nil, nil)
			at := func(m int) time.Time { return slot.Add(time.Duration(m) * time.Minute) }
			var ids []string
			for _, m := range []int{-30, -20} {
				r := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", at(m)), "{}")
				if r.status != http.StatusAccepted {
					t.Fatalf("post tick %d: %d %v", m, r.status, r.body)
				}
				ids = append(ids, r.body["run_id"].(string))
			}
			keyed := b.do(t, http.MethodPost, "/v1/jobs/every", map[string]string{"Idempotency-Key": "by-hand"}, "{}")
			status, a, msg := ticksOf(t, b, "every", window(at(-40), at(10)))
			if status != http.StatusOK {
				t.Fatalf("audit: %d %s", status, msg)
			}
			if diff := cmp.Diff([]string{"missing", "queued", "queued", "missing", "pending"}, statuses(a.Ticks)); diff != "" {
				t.Fatalf("statuses (-want +got):\n%s", diff)
			}
			if a.Ticks[1].RunID != ids[0] || a.Ticks[2].RunID != ids[1] || a.Missing != 2 || a.Ticks[0].GraceSeconds != 120 {
				t.Errorf("audit %+v: want the posted runs on their ticks, 2 missing, a 2-minute grace", a)
			}
			if len(a.Unmatched) != 1 || a.Unmatched[0].RunID != keyed.body["run_id"] || a.Unmatched[0].Reason != "keyed" {
				t.Errorf("unmatched %+v, want the keyed run", a.Unmatched)
			}
			if a.Source != "jobs file" || a.SchedulerJob != "every" || a.Schedule != "*/10 * * * *" || a.TimeZone != "UTC" {
				t.Errorf("the schedule is %+v", a)
			}

			// Pages of two, followed by their tokens: the same ticks.
			var paged []string
			q := window(at(-40), at(10))
			q.Set("page_size", "2")
			for n := 0; ; n++ {
				status, p, msg := ticksOf(t, b, "every", q)
				if status != http.StatusOK || n > 3 {
					t.Fatalf("page %d: %d %s", n, status, msg)
				}
				paged = append(paged, statuses(p.Ticks)...)
				if p.NextPageToken == "" {
					break
				}
				q.Set("page_token", p.NextPageToken)
			}
			if diff := cmp.Diff(statuses(a.Ticks), paged); diff != "" {
				t.Errorf("paged (-want +got):\n%s", diff)
			}

			for _, c := range []struct {
				job    string
				q      url.Values
				status int
				saying string
			}{
				{"nope", window(at(-40), at(10)), http.StatusNotFound, "unknown job"},
				{"plain", window(at(-40), at(10)), http.StatusNotFound, "neither schedule nor scheduler_job"},
				{"every", url.Values{"from": {"yesterday"}}, http.StatusBadRequest, "not an RFC 3339 time"},
				{"every", window(at(10), at(-40)), http.StatusBadRequest, "is not before"},
				{"every", url.Values{"since": {"1h"}}, http.StatusBadRequest, "unknown query parameter"},
				{"every", url.Values{"page_token": {at(100).Format(time.RFC3339)}}, http.StatusBadRequest, "page_token"},
				{"every", url.Values{"page_size": {"5000"}}, http.StatusBadRequest, "not between 1 and 1000"},
			} {
				if status, _, msg := ticksOf(t, b, c.job, c.q); status != c.status || !strings.Contains(msg, c.saying) {
					t.Errorf("GET /v1/jobs/%s/ticks?%s = %d %q, want %d saying %q", c.job, c.q.Encode(), status, msg, c.status, c.saying)
				}
			}
			// The default window is the last day, up to now: 144 ticks, of which two have
			// runs and the last is pending.
			if status, d, _ := ticksOf(t, b, "every", nil); status != http.StatusOK || len(d.Ticks) != 24*6 || d.Missing != 24*6-3 {
				t.Errorf("the default window: %d, %d ticks, %d missing; want the day's 144 ticks, 141 missing", status, len(d.Ticks), d.Missing)
			}
		})
	}
}

// TestJobAPINeedsAnOperator: the audit, run now and backfill are the operators'.
func TestJobAPINeedsAnOperator(t *testing.T) {
	t.Parallel()
	b, _ := scheduledSetup(t, setupOpts{}, jobsFile, nil, func(c *ingress.Config) { c.Operators = nil })
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/jobs/every/ticks"},
		{http.MethodPost, "/v1/jobs/every:run"},
		{http.MethodPost, "/v1/jobs/every:backfill"},
	} {
		r := b.do(t, c.method, c.path, jsonBody, "{}")
		if r.status != http.StatusForbidden || !strings.Contains(r.body["error"].(string), "no operators are configured") {
			t.Errorf("%s %s without operators = %d %v, want 403", c.method, c.path, r.status, r.body)
		}
	}
	if r := b.do(t, http.MethodPost, "/v1/jobs/every:resume", jsonBody, "{}"); r.status != http.StatusNotFound {
		t.Errorf("an unknown action = %d %v, want 404", r.status, r.body)
	}
}

// TestRunNow: POST /v1/jobs/{job}:run starts a run keyed by hand (a made-up key when none
// is given, printed in the answer), which is never a tick's run: the tick that follows
// still makes its own run. The same key is the same run; another payload under it 422.
func TestRunNow(t *testing.T) {
	t.Parallel()
	b, slot := scheduledSetup(t, setupOpts{}, jobsFile, nil, nil)
	r := b.do(t, http.MethodPost, "/v1/jobs/every:run", jsonBody, "{}")
	key, _ := r.body["key"].(string)
	if r.status != http.StatusAccepted || !strings.HasPrefix(key, ingress.ManualKeyPrefix) || r.body["run_id"] != ledger.KeyedRunID(b.ns, "every", key) ||
		r.header.Get("Location") == "" || b.published() != 1 {
		t.Fatalf("run now = %d %v (Location %q), %d published; want 202, a manual key, its keyed run, published", r.status, r.body, r.header.Get("Location"), b.published())
	}
	if again := b.do(t, http.MethodPost, "/v1/jobs/every:run", jsonBody, "{}"); again.body["run_id"] == r.body["run_id"] || again.status != http.StatusAccepted {
		t.Errorf("run now again = %d %v; want a new run", again.status, again.body)
	}
	k1 := b.do(t, http.MethodPost, "/v1/jobs/every:run", jsonBody, `{"key": "rerun-2026-05-04", "payload": "{\"x\":1}"}`)
	if k1.status != http.StatusAccepted || k1.body["key"] != "rerun-2026-05-04" || k1.body["run_id"] != ledger.KeyedRunID(b.ns, "every", "rerun-2026-05-04") {
		t.Fatalf("run now with a key = %d %v", k1.status, k1.body)
	}
	run, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: k1.body["run_id"].(string)})
	if err != nil || string(run.Payload) != `{"x":1}` || !run.ScheduleTime.IsZero() {
		t.Fatalf("the run started by hand: %+v, %v; want its payload and no schedule time", run, err)
	}
	if dup := b.do(t, http.MethodPost, "/v1/jobs/every:run", jsonBody, `{"key": "rerun-2026-05-04", "payload": "{\"x\":1}"}`); dup.body["duplicate"] != true || dup.body["run_id"] != k1.body["run_id"] {
		t.Errorf("the same key again = %d %v; want a duplicate", dup.status, dup.body)
	}
	if other := b.do(t, http.MethodPost, "/v1/jobs/every:run", jsonBody, `{"key": "rerun-2026-05-04", "payload": "other"}`); other.status != http.StatusUnprocessableEntity {
		t.Errorf("the same key with another payload = %d %v; want 422", other.status, other.body)
	}
	// The next tick is its own run, not a duplicate of the runs by hand.
	if tk := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", slot), "{}"); tk.status != http.StatusAccepted || tk.body["duplicate"] == true {
		t.Errorf("the tick after runs by hand = %d %v; want a new run", tk.status, tk.body)
	}
	for _, c := range []struct {
		job, body string
		hdr       map[string]string
		status    int
		saying    string
	}{
		{"every", `{}`, nil, http.StatusUnsupportedMediaType, "Content-Type"},
		{"every", `{"key": "a\u0001b"}`, jsonBody, http.StatusBadRequest, "key"},
		{"every", `{"when": "now"}`, jsonBody, http.StatusBadRequest, "unknown field"},
		{"nope", `{}`, jsonBody, http.StatusNotFound, "unknown job"},
	} {
		if r := b.do(t, http.MethodPost, "/v1/jobs/"+c.job+":run", c.hdr, c.body); r.status != c.status || !strings.Contains(r.body["error"].(string), c.saying) {
			t.Errorf("run now %s %s = %d %v, want %d saying %q", c.job, c.body, r.status, r.body, c.status, c.saying)
		}
	}
	// A forced run through the scheduler names the command.
	if f := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", slot.Add(time.Hour)), "{}"); f.status != http.StatusBadRequest ||
		!strings.Contains(f.body["error"].(string), "runonce jobs run every") {
		t.Errorf("a forced run = %d %v; want 400 naming runonce jobs run", f.status, f.body)
	}
}

// backfill posts a backfill and returns its answer.
func backfill(t *testing.T, b *bundle, job string, req map[string]any) (int, api.BackfillJSON, string) {
	t.Helper()
	body, _ := json.Marshal(req)
	r := b.do(t, http.MethodPost, "/v1/jobs/"+job+":backfill", jsonBody, string(body))
	raw, _ := json.Marshal(r.body)
	var out api.BackfillJSON
	if r.status == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
	}
	msg, _ := r.body["error"].(string)
	return r.status, out, msg
}

// TestBackfill: backfill claims each missing tick, and nothing else, under the run ID
// the scheduler's delivery of the tick has, so a late delivery is a duplicate of it;
// a dry run claims nothing; a second backfill finds nothing to claim; ticks older than
// the retention are refused.
func TestBackfill(t *testing.T) {
	t.Parallel()
	for _, be := range scheduleBackends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b, slot := scheduledSetup(t, be.opts, jobsFile, nil, nil)
			at := func(m int) time.Time { return slot.Add(time.Duration(m) * time.Minute) }
			if r := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", at(-20)), "{}"); r.status != http.StatusAccepted {
				t.Fatal(r.body)
			}
			w := map[string]any{"from": at(-30), "to": at(10)}
			status, dry, msg := backfill(t, b, "every", map[string]any{"from": at(-30), "to": at(10), "dry_run": true})
			if status != http.StatusOK || len(dry.Ticks) != 2 || dry.Claimed != 0 || dry.Ticks[0].Outcome != api.BackfillWouldClaim || b.published() != 1 {
				t.Fatalf("dry run = %d %+v %s, %d published; want the two missing ticks, nothing claimed", status, dry, msg, b.published())
			}
			status, done, msg := backfill(t, b, "every", w)
			want := []api.BackfilledJSON{
				{Tick: at(-30), RunID: ledger.ScheduledRunID(b.ns, "every", "every", at(-30)), Outcome: api.BackfillClaimed},
				{Tick: at(-10), RunID: ledger.ScheduledRunID(b.ns, "every", "every", at(-10)), Outcome: api.BackfillClaimed},
			}
			if diff := cmp.Diff(want, done.Ticks); status != http.StatusOK || diff != "" || done.Claimed != 2 || b.published() != 3 {
				t.Fatalf("backfill = %d %s (-want +got):\n%s\n%d published, want 3", status, msg, diff, b.published())
			}
			if status, a, _ := ticksOf(t, b, "every", window(at(-30), at(10))); status != http.StatusOK || a.Missing != 0 {
				t.Errorf("the audit after the backfill: %v", statuses(a.Ticks))
			}
			late := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", at(-30)), "")
			if late.body["duplicate"] != true || late.body["run_id"] != want[0].RunID || b.published() != 3 {
				t.Errorf("a late delivery of a backfilled tick = %d %v; want a duplicate of %s", late.status, late.body, want[0].RunID)
			}
			if status, again, _ := backfill(t, b, "every", w); status != http.StatusOK || len(again.Ticks) != 0 {
				t.Errorf("a second backfill = %d %+v; want nothing to claim", status, again)
			}
			old := slot.Add(-ledger.DefaultRetention - time.Hour)
			if status, _, msg := backfill(t, b, "every", map[string]any{"from": old, "to": at(0)}); status != http.StatusBadRequest ||
				!strings.Contains(msg, "older than the retention") || !strings.Contains(msg, "backfill from") {
				t.Errorf("a backfill beyond the retention = %d %q; want 400 naming the retention and where to start", status, msg)
			}
			for _, c := range []struct {
				req    string
				saying string
			}{
				{`{"from": "2026-05-04T00:00:00Z"}`, "needs from and to"},
				{`{"from": "yesterday", "to": "now"}`, "not JSON"},
			} {
				r := b.do(t, http.MethodPost, "/v1/jobs/every:backfill", jsonBody, c.req)
				if r.status != http.StatusBadRequest || !strings.Contains(r.body["error"].(string), c.saying) {
					t.Errorf("backfill %s = %d %v, want 400 saying %q", c.req, r.status, r.body, c.saying)
				}
			}
		})
	}
}

// TestBackfillPagesAndRate: a backfill looks at ingress.BackfillPageSize ticks a request,
// claims at most BackfillRate a second, and the page token goes on.
func TestBackfillPagesAndRate(t *testing.T) {
	t.Parallel()
	b, slot := scheduledSetup(t, setupOpts{}, `{"jobs": {"minutely": {"schedule": "* * * * *"}}}`, nil,
		func(c *ingress.Config) { c.BackfillRate = 40 })
	from, to := slot.Add(-150*time.Minute), slot.Add(-20*time.Minute) // 130 missing ticks
	req := map[string]any{"from": from, "to": to}
	t0 := time.Now()
	status, first, msg := backfill(t, b, "minutely", req)
	if status != http.StatusOK || first.Claimed != ingress.BackfillPageSize || first.NextPageToken == "" {
		t.Fatalf("first page = %d %s: %d claimed, next %q; want %d and a token", status, msg, first.Claimed, first.NextPageToken, ingress.BackfillPageSize)
	}
	// 100 claims at 40 a second, 40 at once: at least 1.5 s.
	if took := time.Since(t0); took < 1400*time.Millisecond {
		t.Errorf("100 claims at 40/s took %s", took)
	}
	req["page_token"] = first.NextPageToken
	status, second, msg := backfill(t, b, "minutely", req)
	if status != http.StatusOK || second.Claimed != 30 || second.NextPageToken != "" || b.published() != 130 {
		t.Fatalf("second page = %d %s: %+v, %d published; want the last 30", status, msg, second, b.published())
	}
}

// TestBackfillCarriesTheSchedulersBody: a scheduler_job's ticks are backfilled with the
// body its Cloud Scheduler job sends, so that the scheduler's late delivery of one is a
// duplicate (with another payload it would be refused, 422).
func TestBackfillCarriesTheSchedulersBody(t *testing.T) {
	t.Parallel()
	fake, err := cloudschedulertest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	const name = "projects/acme/locations/europe-west1/jobs/nightly-billing"
	if err := fake.Put(&schedulerpb.Job{Name: name, Schedule: "*/10 * * * *",
		Target: &schedulerpb.Job_HttpTarget{HttpTarget: &schedulerpb.HttpTarget{Uri: "https://ingress/v1/jobs/billing", Body: []byte(`{"region":"eu"}`)}}}); err != nil {
		t.Fatal(err)
	}
	opts, err := fake.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	b, slot := scheduledSetup(t, setupOpts{}, `{"jobs": {"billing": {"scheduler_job": "`+name+`", "missed_after": "2m"}}}`,
		&ticks.BookOptions{ClientOptions: opts}, nil)
	tick := slot.Add(-10 * time.Minute)
	status, done, msg := backfill(t, b, "billing", map[string]any{"from": tick, "to": slot})
	if status != http.StatusOK || done.Claimed != 1 || done.Ticks[0].RunID != ledger.ScheduledRunID(b.ns, "billing", "nightly-billing", tick) {
		t.Fatalf("backfill = %d %s %+v; want the tick claimed under the scheduler job's name", status, msg, done)
	}
	late := b.do(t, http.MethodPost, "/v1/jobs/billing", schedHeaders("nightly-billing", tick), `{"region":"eu"}`)
	if late.body["duplicate"] != true || late.body["run_id"] != done.Ticks[0].RunID {
		t.Errorf("the scheduler's late delivery = %d %v; want a duplicate", late.status, late.body)
	}
}

// TestTicksPage: the dashboard shows a job's ticks (/ui/jobs/{job}) with each tick's
// status and run, lists the scheduled jobs (/ui/jobs/), and keeps both to operators.
func TestTicksPage(t *testing.T) {
	t.Parallel()
	b, slot := scheduledSetup(t, setupOpts{}, jobsFile, nil, nil)
	at := func(m int) time.Time { return slot.Add(time.Duration(m) * time.Minute) }
	r := b.do(t, http.MethodPost, "/v1/jobs/every", schedHeaders("every", at(-20)), "{}")
	if r.status != http.StatusAccepted {
		t.Fatalf("post: %d %v", r.status, r.body)
	}
	id := r.body["run_id"].(string)
	get := func(srv, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		if _, err := io.Copy(&sb, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, sb.String()
	}
	status, page := get(b.srv.URL, "/ui/jobs/every?"+window(at(-30), at(0)).Encode())
	for _, want := range []string{`<h1>Ticks of every</h1>`, `status-missing`, `href="/ui/runs/` + id + `"`, `status-queued`, "runonce jobs backfill every --from"} {
		if status != http.StatusOK || !strings.Contains(page, want) {
			t.Fatalf("/ui/jobs/every: %d, want %q in:\n%s", status, want, page)
		}
	}
	if strings.Count(page, "<tr>") != 4 { // the header and ticks -30, -20, -10
		t.Errorf("want 3 tick rows:\n%s", page)
	}
	if status, page := get(b.srv.URL, "/ui/jobs/"); status != http.StatusOK || !strings.Contains(page, `href="/ui/jobs/every"`) || strings.Contains(page, "/ui/jobs/plain") {
		t.Errorf("/ui/jobs/: %d, want a link to every only:\n%s", status, page)
	}
	if status, page := get(b.srv.URL, "/ui/jobs/plain"); status != http.StatusNotFound || !strings.Contains(page, "neither schedule nor scheduler_job") {
		t.Errorf("/ui/jobs/plain: %d\n%s", status, page)
	}
	nb, _ := scheduledSetup(t, setupOpts{}, jobsFile, nil, func(c *ingress.Config) { c.Operators = nil })
	if status, page := get(nb.srv.URL, "/ui/jobs/every"); status != http.StatusForbidden || !strings.Contains(page, "needs an operator") {
		t.Errorf("/ui/jobs/every without operators: %d\n%s", status, page)
	}
}
