package ingress_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// operatorBackends are the ledgers the operators' API is tested on: the in-process
// ones, and PostgreSQL when TEST_DATABASE_URL is set.
func operatorBackends() []struct {
	name string
	open func(tb testing.TB) ledger.Driver
} {
	var out []struct {
		name string
		open func(tb testing.TB) ledger.Driver
	}
	for _, b := range backends {
		out = append(out, struct {
			name string
			open func(tb testing.TB) ledger.Driver
		}{b.name, func(tb testing.TB) ledger.Driver { return b.open(tb, nil) }})
	}
	for _, b := range serviceBackends() {
		if b.name == "postgres" {
			out = append(out, b)
		}
	}
	return out
}

// jsonBody declares a request's body JSON, as an action's must be.
var jsonBody = map[string]string{"Content-Type": "application/json"}

func operatorSetup(t *testing.T, open func(tb testing.TB) ledger.Driver) *bundle {
	return setup(t, setupOpts{open: open, namespace: "ops-" + uuid.NewString()[:8], cfg: func(c *ingress.Config) { c.Operators = auth.None{} }})
}

// failRun posts a run of job and fails its first attempt with msg, through the ledger.
func (b *bundle) failRun(t *testing.T, job, msg string) string {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/jobs/"+job, map[string]string{"Idempotency-Key": uuid.NewString()}, `{"invoice":42}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST /v1/jobs/%s: %d %v", job, r.status, r.body)
	}
	id := r.body["run_id"].(string)
	ctx := t.Context()
	f := b.hold(t, id, "host-a/1")
	if _, err := b.led.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "send-email"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.led.Fail(ctx, &ledger.FailParams{Fence: f, Error: msg}); err != nil {
		t.Fatal(err)
	}
	return id
}

// hold claims run id as worker would and returns the attempt's fence.
func (b *bundle) hold(t *testing.T, id, worker string) ledger.Fence {
	t.Helper()
	ctx := t.Context()
	cur, err := b.led.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.led.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: cur.PayloadHash}, AttemptID: uuid.NewString(), Worker: worker})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire(%s): %v %v", id, res, err)
	}
	return ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
}

func TestOperatorsFindUnderstandRetryAndCancel(t *testing.T) {
	t.Parallel()
	for _, be := range operatorBackends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := operatorSetup(t, be.open)
			job := "send-invoices-" + uuid.NewString()[:6]
			id := b.failRun(t, job, "smtp: 554 rejected")

			// Find it.
			r := b.do(t, http.MethodGet, "/v1/runs?status=failed&since=1h&job="+job, nil, "")
			runs, _ := r.body["runs"].([]any)
			if r.status != http.StatusOK || len(runs) != 1 || runs[0].(map[string]any)["run_id"] != id {
				t.Fatalf("GET /v1/runs?status=failed = %d %v; want the failed run", r.status, r.body)
			}
			if _, has := runs[0].(map[string]any)["payload"]; has {
				t.Fatal("the list shows a payload")
			}

			// Understand it: every attempt, its error, its effects.
			r = b.do(t, http.MethodGet, "/v1/runs/"+id, nil, "")
			atts, _ := r.body["attempts"].([]any)
			effs, _ := r.body["effects"].([]any)
			if r.status != http.StatusOK || len(atts) != 1 || len(effs) != 1 {
				t.Fatalf("GET /v1/runs/{id} = %d %v; want one attempt and one effect", r.status, r.body)
			}
			a := atts[0].(map[string]any)
			if a["outcome"] != "failed" || a["error"] != "smtp: 554 rejected" || a["worker"] != "host-a/1" {
				t.Fatalf("attempt = %v; want failed by host-a/1 with its error", a)
			}
			if e := effs[0].(map[string]any); e["name"] != "send-email" || e["status"] != "pending" || e["key"] != ledger.EffectKey(id, "send-email") {
				t.Fatalf("effect = %v", e)
			}
			if _, has := r.body["payload"]; has {
				t.Fatal("the basic view shows the payload")
			}
			r = b.do(t, http.MethodGet, "/v1/runs/"+id+"?view=full", nil, "")
			if p, _ := r.body["payload"].(map[string]any); r.status != http.StatusOK || p["text"] != `{"invoice":42}` {
				t.Fatalf("view=full = %d %v; want the payload as text", r.status, r.body)
			}

			// Retry it: queued, republished, its history says who and why.
			before := b.published()
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":retry", jsonBody, `{"reason":"relay fixed"}`)
			if r.status != http.StatusOK || r.body["status"] != "queued" || r.body["republished"] != true || r.body["attempts_made"] != 0.0 {
				t.Fatalf("POST :retry = %d %v; want 200 queued, republished, a fresh budget", r.status, r.body)
			}
			if got := b.published(); got != before+1 {
				t.Fatalf("%d messages published by the retry, want 1", got-before)
			}
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":retry", jsonBody, `{"reason":"again"}`)
			if r.status != http.StatusConflict || !strings.Contains(r.body["error"].(string), "only a failed run can be retried") {
				t.Fatalf("a second :retry = %d %v; want 409 naming the rule", r.status, r.body)
			}

			// Cancel it while queued; a later duplicate answers 200 cancelled.
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":cancel", jsonBody, `{"reason":"duplicate invoices"}`)
			if r.status != http.StatusOK || r.body["status"] != "cancelled" {
				t.Fatalf("POST :cancel = %d %v; want 200 cancelled", r.status, r.body)
			}
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":release", jsonBody, `{"reason":"free it"}`)
			if r.status != http.StatusConflict {
				t.Fatalf("POST :release of a cancelled run = %d %v; want 409", r.status, r.body)
			}
			r = b.do(t, http.MethodGet, "/v1/runs/"+id, nil, "")
			hist, _ := r.body["history"].([]any)
			last, _ := hist[len(hist)-1].(map[string]any)
			if last["kind"] != "cancelled" || last["text"] != "duplicate invoices" || last["actor"] != "anonymous (authentication off)" {
				t.Fatalf("the last history event = %v; want the cancellation, its reason and actor", last)
			}
			if n := len(b.listIDs(t, "status=cancelled&job="+job)); n != 1 {
				t.Fatalf("%d cancelled runs listed, want 1", n)
			}
		})
	}
}

func TestDuplicateOfACancelledRunAnswers200(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	hdr := map[string]string{"Idempotency-Key": "nightly-1"}
	r := b.do(t, http.MethodPost, "/v1/jobs/report", hdr, "{}")
	id := r.body["run_id"].(string)
	if r = b.do(t, http.MethodPost, "/v1/runs/"+id+":cancel", jsonBody, `{"reason":"must not go out"}`); r.status != http.StatusOK {
		t.Fatalf(":cancel = %d %v", r.status, r.body)
	}
	before := b.published()
	r = b.do(t, http.MethodPost, "/v1/jobs/report", hdr, "{}")
	if r.status != http.StatusOK || r.body["status"] != "cancelled" || r.body["duplicate"] != true {
		t.Fatalf("a duplicate of a cancelled run = %d %v; want 200 cancelled duplicate", r.status, r.body)
	}
	if b.published() != before {
		t.Fatal("a duplicate of a cancelled run was republished")
	}
}

func (b *bundle) listIDs(t *testing.T, query string) []string {
	t.Helper()
	var ids []string
	token := ""
	for range 100 {
		q := query
		if token != "" {
			q += "&page_token=" + url.QueryEscape(token)
		}
		r := b.do(t, http.MethodGet, "/v1/runs?"+q, nil, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/runs?%s = %d %v", q, r.status, r.body)
		}
		runs, _ := r.body["runs"].([]any)
		for _, x := range runs {
			ids = append(ids, x.(map[string]any)["run_id"].(string))
		}
		token, _ = r.body["next_page_token"].(string)
		if token == "" {
			return ids
		}
	}
	t.Fatal("the listing does not end")
	return nil
}

func TestListPaginates(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[1].open(tb, nil) })
	want := map[string]bool{}
	for i := range 7 {
		r := b.do(t, http.MethodPost, "/v1/jobs/pages", map[string]string{"Idempotency-Key": "k" + string(rune('a'+i))}, "{}")
		want[r.body["run_id"].(string)] = true
	}
	ids := b.listIDs(t, "job=pages&page_size=3")
	if len(ids) != len(want) {
		t.Fatalf("listed %d runs, want %d", len(ids), len(want))
	}
	for _, id := range ids {
		if !want[id] {
			t.Fatalf("listed %s, not one of the job's runs", id)
		}
		delete(want, id)
	}
}

func TestOperatorRequestsNameTheProblem(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	absent := strings.Repeat("0", 64)
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/v1/runs?status=lost", "", 400, "status"},
		{"GET", "/v1/runs?since=yesterday", "", 400, "since"},
		{"GET", "/v1/runs?page_size=100000", "", 400, "page_size"},
		{"GET", "/v1/runs?colour=red", "", 400, "unknown query parameter"},
		{"GET", "/v1/runs?page_token=junk", "", 400, "cursor"},
		{"GET", "/v1/runs?created_after=yesterday", "", 400, "RFC 3339"},
		{"GET", "/v1/runs?since=1h&updated_after=2026-01-01T00:00:00Z", "", 400, "not both"},
		{"GET", "/v1/runs/" + id + "?view=everything", "", 400, "view"},
		{"POST", "/v1/runs/" + id + ":retry", `{}`, 400, "needs a reason"},
		{"POST", "/v1/runs/" + id + ":retry", `reason`, 400, "not JSON"},
		{"POST", "/v1/runs/" + id + ":explode", `{"reason":"x"}`, 404, "no such action"},
		{"POST", "/v1/runs/" + id, `{"reason":"x"}`, 404, "no such action"},
		{"POST", "/v1/runs/" + absent + ":cancel", `{"reason":"x"}`, 404, "no run"},
		{"POST", "/v1/runs/nope:cancel", `{"reason":"x"}`, 400, "64 lower-case hex"},
		{"POST", "/v1/runs/" + id + ":cancel", `{"reason":"x"}`, 409, "only a queued or running run can be cancelled"},
		{"POST", "/v1/runs/" + id + ":retry", `{"reason":"x","attempt":7}`, 409, "not 7"},
		{"POST", "/v1/runs/" + id + ":retry", `{"reason":"` + strings.Repeat("x", ledger.MaxReason+1) + `"}`, 400, "reason"},
		{"DELETE", "/v1/runs/" + id, "", 405, "GET, POST"},
	} {
		r := b.do(t, c.method, c.path, jsonBody, c.body)
		msg, _ := r.body["error"].(string)
		if r.status != c.status || !strings.Contains(msg, c.want) {
			t.Errorf("%s %.80s %.40s = %d %q; want %d naming %q", c.method, c.path, c.body, r.status, msg, c.status, c.want)
		}
	}
	if got, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); err != nil || got.Status != ledger.StatusFailed {
		t.Fatalf("after the refused requests the run is %v (%v), want failed", got, err)
	}
}

func TestRetryWhosePublishFailsSaysTheRescuerRepublishes(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	b.pub.fail.Store(true)
	r := b.do(t, http.MethodPost, "/v1/runs/"+id+":retry", jsonBody, `{"reason":"again"}`)
	if r.status != http.StatusOK || r.body["republished"] != false || !strings.Contains(r.body["warning"].(string), "rescuer") {
		t.Fatalf(":retry with Pub/Sub down = %d %v; want 200, not republished, a warning naming the rescuer", r.status, r.body)
	}
	if got, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); got.Status != ledger.StatusQueued || got.Deadline.IsZero() {
		t.Fatalf("run = %v; want queued with a pickup deadline", got)
	}
}

// unsupportedLedger refuses the operators' methods, as a backend that lacks them does.
type unsupportedLedger struct {
	ledger.Driver
	no driver.NoOperations
}

func (u unsupportedLedger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	return u.no.List(ctx, p)
}

func (u unsupportedLedger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return u.no.Cancel(ctx, p)
}

func TestUnsupportedBackendAnswers501(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver {
		return unsupportedLedger{Driver: backends[0].open(tb, nil), no: driver.NoOperations{Backend: "test"}}
	})
	if r := b.do(t, http.MethodGet, "/v1/runs", nil, ""); r.status != http.StatusNotImplemented || !strings.Contains(r.body["error"].(string), "not supported") {
		t.Fatalf("GET /v1/runs = %d %v; want 501", r.status, r.body)
	}
	id := b.do(t, http.MethodPost, "/v1/jobs/j", map[string]string{"Idempotency-Key": "k"}, "{}").body["run_id"].(string)
	if r := b.do(t, http.MethodPost, "/v1/runs/"+id+":cancel", jsonBody, `{"reason":"x"}`); r.status != http.StatusNotImplemented {
		t.Fatalf(":cancel = %d %v; want 501", r.status, r.body)
	}
}

// idp is an OIDC provider for tests: newOIDC verifies its tokens for the emails allow
// lists, tok signs one for email (as headers, with a JSON Content-Type).
func idp(t *testing.T) (newOIDC func(allow ...string) *auth.OIDC, tok func(email string) map[string]string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &oidctest.Server{PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: "k", Algorithm: "RS256"}}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.SetIssuer(srv.URL)
	newOIDC = func(allow ...string) *auth.OIDC {
		v, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Audience: "aud", Allow: allow, Issuers: []string{srv.URL}, JWKSURL: srv.URL + "/keys"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tok = func(email string) map[string]string {
		c, _ := json.Marshal(map[string]any{"iss": srv.URL, "aud": "aud", "sub": "1", "email": email, "email_verified": true,
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
		return map[string]string{"Authorization": "Bearer " + oidctest.SignIDToken(key, "k", "RS256", string(c)), "Content-Type": "application/json"}
	}
	return newOIDC, tok
}

func TestReadersAndOperatorsAreAllowedSeparately(t *testing.T) {
	t.Parallel()
	newOIDC, tok := idp(t)
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) {
		c.Auth = newOIDC("scheduler@p.iam.gserviceaccount.com")
		c.Operators = newOIDC("oncall@example.com")
	}})
	sched, oncall, other := tok("scheduler@p.iam.gserviceaccount.com"), tok("oncall@example.com"), tok("other@example.com")
	hdr := tok("scheduler@p.iam.gserviceaccount.com")
	hdr["Idempotency-Key"] = "k"
	id := b.do(t, http.MethodPost, "/v1/jobs/j", hdr, "{}").body["run_id"].(string)
	for _, c := range []struct {
		name         string
		hdr          map[string]string
		method, path string
		want         int
	}{
		{"reader lists", sched, "GET", "/v1/runs", 200},
		{"operator lists", oncall, "GET", "/v1/runs", 200},
		{"stranger lists", other, "GET", "/v1/runs", 403},
		{"nobody lists", nil, "GET", "/v1/runs", 401},
		{"reader reads", sched, "GET", "/v1/runs/" + id, 200},
		{"reader asks for the payload", sched, "GET", "/v1/runs/" + id + "?view=full", 403},
		{"operator asks for the payload", oncall, "GET", "/v1/runs/" + id + "?view=full", 200},
		{"reader cancels", sched, "POST", "/v1/runs/" + id + ":cancel", 403},
		{"nobody cancels", nil, "POST", "/v1/runs/" + id + ":cancel", 401},
		{"reader resolves", sched, "POST", "/v1/runs/" + id + ":resolve", 403},
		{"nobody resolves", nil, "POST", "/v1/runs/" + id + ":resolve", 401},
		{"operator cancels", oncall, "POST", "/v1/runs/" + id + ":cancel", 200},
	} {
		if r := b.do(t, c.method, c.path, c.hdr, `{"reason":"test"}`); r.status != c.want {
			t.Errorf("%s: %s %s = %d %v, want %d", c.name, c.method, c.path, r.status, r.body, c.want)
		}
	}
	r := b.do(t, http.MethodGet, "/v1/runs/"+id, oncall, "")
	hist, _ := r.body["history"].([]any)
	if last, _ := hist[len(hist)-1].(map[string]any); last["actor"] != "oncall@example.com" {
		t.Fatalf("the cancellation's actor = %v, want the operator's verified email", last["actor"])
	}
	nob := setup(t, setupOpts{})
	if r := nob.do(t, http.MethodPost, "/v1/runs/"+id+":cancel", jsonBody, `{"reason":"x"}`); r.status != http.StatusForbidden || !strings.Contains(r.body["error"].(string), "-operators") {
		t.Fatalf("an action with no operators configured = %d %v; want 403 naming -operators", r.status, r.body)
	}
}

// TestRunsByIDPrefix: GET /v1/runs/{prefix} answers the one run whose ID starts with the
// prefix (the tables show 12 digits), 409 listing the candidates when several do, 404
// when none does, 400 for a prefix too short; the dashboard's /ui/runs/{prefix} redirects
// to the run's page. An action needs the full ID.
func TestRunsByIDPrefix(t *testing.T) {
	t.Parallel()
	for _, be := range operatorBackends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := operatorSetup(t, be.open)
			id := b.failRun(t, "prefixed", "boom")
			r := b.do(t, http.MethodGet, "/v1/runs/"+id[:12], nil, "")
			if r.status != http.StatusOK || r.body["run_id"] != id || r.header.Get("Content-Location") != "/v1/runs/"+id {
				t.Fatalf("GET /v1/runs/%s = %d %v (Content-Location %q); want run %s", id[:12], r.status, r.body, r.header.Get("Content-Location"), id)
			}
			if r := b.do(t, http.MethodGet, "/v1/runs/"+id[:ledger.MinRunIDPrefix]+"?view=full", nil, ""); r.status != http.StatusOK || r.body["payload"] == nil {
				t.Fatalf("GET /v1/runs/%s?view=full = %d %v; want the run with its payload", id[:ledger.MinRunIDPrefix], r.status, r.body)
			}
			// Two runs whose IDs share 12 digits that no other run has.
			p := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
			x, y := p+"1"+strings.Repeat("0", 51), p+"2"+strings.Repeat("0", 51)
			for _, rid := range []string{x, y} {
				if _, err := b.led.Claim(t.Context(), &ledger.ClaimParams{Identity: ledger.Identity{RunID: rid, Job: "prefixed"}, AttemptID: uuid.NewString()}); err != nil {
					t.Fatal(err)
				}
			}
			r = b.do(t, http.MethodGet, "/v1/runs/"+p, nil, "")
			if c, _ := r.body["candidates"].([]any); r.status != http.StatusConflict || len(c) != 2 || c[0] != x || c[1] != y ||
				!strings.Contains(r.body["error"].(string), "more than one run") {
				t.Fatalf("GET /v1/runs/%s = %d %v; want 409 listing %s and %s", p, r.status, r.body, x, y)
			}
			for path, want := range map[string]struct {
				status int
				error  string
			}{
				"/v1/runs/" + p + "3":                 {404, "no run ID starts with " + p + "3"},
				"/v1/runs/" + id[:5]:                  {400, "prefix of at least 6"},
				"/v1/runs/" + strings.ToUpper(id[:8]): {400, "neither 64 lower-case hex digits nor a prefix"},
			} {
				if r := b.do(t, http.MethodGet, path, nil, ""); r.status != want.status || !strings.Contains(r.body["error"].(string), want.error) {
					t.Errorf("GET %s = %d %v; want %d naming %q", path, r.status, r.body, want.status, want.error)
				}
			}
			if r := b.do(t, http.MethodPost, "/v1/runs/"+id[:12]+":retry", nil, `{"reason":"x"}`); r.status != http.StatusBadRequest || !strings.Contains(r.body["error"].(string), "full ID") {
				t.Fatalf("POST /v1/runs/%s:retry = %d %v; want 400: an action needs the full ID", id[:12], r.status, r.body)
			}

			// The dashboard: a redirect to the run's page, or the candidates as links.
			noFollow := *b.srv.Client()
			noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			get := func(path string) (int, string, string) {
				resp, err := noFollow.Get(b.srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header.Get("Location"), string(body)
			}
			if status, loc, _ := get("/ui/runs/" + id[:12] + "?done=retry"); status != http.StatusFound || loc != "/ui/runs/"+id+"?done=retry" {
				t.Errorf("GET /ui/runs/%s = %d to %q; want a redirect to the run's page", id[:12], status, loc)
			}
			if status, _, body := get("/ui/runs/" + p); status != http.StatusConflict ||
				!strings.Contains(body, `href="/ui/runs/`+x+`"`) || !strings.Contains(body, `href="/ui/runs/`+y+`"`) {
				t.Errorf("GET /ui/runs/%s = %d; want 409 linking both runs:\n%s", p, status, body)
			}
			if status, _, _ := get("/ui/runs/" + p + "3"); status != http.StatusNotFound {
				t.Errorf("GET /ui/runs/%s3 = %d, want 404", p, status)
			}
			// The runs table shows the run's key beside its short ID.
			key, _ := b.do(t, http.MethodGet, "/v1/runs/"+id, nil, "").body["key"].(string)
			if status, _, body := get("/ui/?job=prefixed"); status != http.StatusOK || key == "" || !strings.Contains(body, ">"+key+"</td>") {
				t.Errorf("GET /ui/?job=prefixed = %d; want the run's key %q in the table:\n%s", status, key, body)
			}
		})
	}
}

// TestRunErrorsAreForOperatorsOnly: a run's errors may carry what its target answered
// (an HTTP target's body) and called (its URL). A caller who is not an operator (the
// scheduler's service account, a webhook) sees the run's status and result, never its
// errors: not in the 200 for a duplicate of the failed run, nor in the run's record,
// the list or the dashboard. An operator sees them all.
func TestRunErrorsAreForOperatorsOnly(t *testing.T) {
	t.Parallel()
	newOIDC, tok := idp(t)
	const scheduler, oncall = "scheduler@p.iam.gserviceaccount.com", "oncall@example.com"
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) {
		c.Auth = newOIDC(scheduler, oncall)
		c.Operators = newOIDC(oncall)
	}})
	secret := `job pay: POST https://billing.internal/pay?token=s3cr3t answered 400: "account 12345 of jane@example.com is closed"`
	post := func(email string) reply {
		hdr := tok(email)
		hdr["Idempotency-Key"] = "pay-1"
		return b.do(t, http.MethodPost, "/v1/jobs/pay", hdr, "{}")
	}
	id := post(scheduler).body["run_id"].(string)
	cur, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	for attempt := range 2 {
		res, err := b.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: cur.PayloadHash}, AttemptID: uuid.NewString(), Worker: "w/1"})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire: %v %v", res, err)
		}
		f := ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
		if attempt == 0 {
			_, err = b.led.Release(t.Context(), &ledger.ReleaseParams{Fence: f, Error: "released: " + secret})
		} else {
			_, err = b.led.Fail(t.Context(), &ledger.FailParams{Fence: f, Error: secret})
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	leaks := func(who, what string, r reply) {
		t.Helper()
		raw, _ := json.Marshal(r.body)
		if r.status/100 != 2 || strings.Contains(string(raw), "s3cr3t") || strings.Contains(string(raw), "jane@example.com") {
			t.Errorf("%s: %s = %d %s; want it without the run's errors", who, what, r.status, raw)
		}
	}
	shows := func(who, what string, r reply) {
		t.Helper()
		raw, _ := json.Marshal(r.body)
		if r.status/100 != 2 || !strings.Contains(string(raw), "s3cr3t") {
			t.Errorf("%s: %s = %d %s; want the run's errors", who, what, r.status, raw)
		}
	}
	r := post(scheduler)
	if r.status != http.StatusOK || r.body["status"] != "failed" || r.body["duplicate"] != true {
		t.Fatalf("the scheduler's duplicate = %d %v; want 200 failed", r.status, r.body)
	}
	leaks("the scheduler", "a duplicate of the failed run", r)
	detail := b.do(t, http.MethodGet, "/v1/runs/"+id, tok(scheduler), "")
	leaks("the scheduler", "GET /v1/runs/{id}", detail)
	if detail.body["errors_hidden"] != true || detail.body["status"] != "failed" || len(detail.body["attempts"].([]any)) != 2 {
		t.Errorf("the scheduler's GET /v1/runs/{id} = %v; want the failed run, its two attempts, errors_hidden", detail.body)
	}
	leaks("the scheduler", "GET /v1/runs", b.do(t, http.MethodGet, "/v1/runs?job=pay", tok(scheduler), ""))

	shows("the operator", "a duplicate of the failed run", post(oncall))
	if r := post(oncall); r.body["last_error"] != secret {
		t.Errorf("the operator's duplicate's last_error = %v, want the run's error", r.body["last_error"])
	}
	detail = b.do(t, http.MethodGet, "/v1/runs/"+id, tok(oncall), "")
	shows("the operator", "GET /v1/runs/{id}", detail)
	if _, hidden := detail.body["errors_hidden"]; hidden {
		t.Errorf("the operator's GET /v1/runs/{id} says errors_hidden")
	}
	shows("the operator", "GET /v1/runs", b.do(t, http.MethodGet, "/v1/runs?job=pay", tok(oncall), ""))

	page := func(email string) string {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/ui/runs/"+id, nil)
		req.Header.Set("Authorization", tok(email)["Authorization"])
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	if p := page(scheduler); strings.Contains(p, "s3cr3t") || !strings.Contains(p, "Only operators") {
		t.Errorf("the scheduler's dashboard page shows the run's errors, or does not say they are hidden:\n%s", p)
	}
	if p := page(oncall); !strings.Contains(p, "s3cr3t") {
		t.Errorf("the operator's dashboard page lacks the run's error:\n%s", p)
	}
}
