package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/ticks"
)

// scheduledServer is an ingress whose jobs file gives "every" a schedule every ten
// minutes, on a clock a minute into the current ten-minute slot (returned).
func scheduledServer(t *testing.T) (url string, now func() time.Time, slot time.Time) {
	t.Helper()
	ctx := context.Background()
	led, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "runonce.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	ps, err := pubsubtest.NewInProcess(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	t.Cleanup(func() { pub.Close() })
	js, err := jobs.Parse(strings.NewReader(`{"jobs": {"every": {"schedule": "*/10 * * * *", "missed_after": "2m"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	book, err := ticks.NewBook(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	slot = time.Now().UTC().Truncate(10 * time.Minute)
	offset := time.Until(slot.Add(time.Minute))
	now = func() time.Time { return time.Now().Add(offset) }
	h, err := ingress.New(&ingress.Config{Ledger: ledger.New(led, nil), Publisher: pub, Namespace: "ns", Auth: auth.None{}, Operators: auth.None{},
		Jobs: jobs.Names(js), Schedules: book, Now: now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, now, slot
}

// runAt runs the command with its clock at now.
func runAt(t *testing.T, base string, now func() time.Time, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	_, err := run(t.Context(), args, config.Env{"RUNONCE_URL": base}, &out, &errb, &globals{now: now})
	return result{config.ExitCode(err), out.String(), errb.String() + errText(err)}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestAuditBackfillAndRunNowFromTheCLI: jobs ticks shows each tick's status and says how
// to backfill the missing ones; jobs backfill --dry-run lists them, jobs backfill claims
// them under the scheduler's run IDs, after which none is missing; jobs run starts a run
// under a key of its own, given or made.
func TestAuditBackfillAndRunNowFromTheCLI(t *testing.T) {
	t.Parallel()
	base, now, slot := scheduledServer(t)
	tick := slot.Add(-20 * time.Minute)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/jobs/every", strings.NewReader("{}"))
	req.Header.Set(ingress.HeaderSchedulerJobName, "every")
	req.Header.Set(ingress.HeaderSchedulerScheduleTime, tick.Format(time.RFC3339))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	posted := ledger.ScheduledRunID("ns", "every", "every", tick)
	from, to := slot.Add(-40*time.Minute).Format(time.RFC3339), slot.Format(time.RFC3339)

	r := runAt(t, base, now, "jobs", "ticks", "every", "--from", from, "--to", to)
	var tickRow string
	for l := range strings.Lines(r.stdout) {
		if strings.HasPrefix(l, tick.Format(time.RFC3339)) {
			tickRow = l
		}
	}
	if r.code != 0 || !strings.HasPrefix(r.stdout, `every: "*/10 * * * *" in UTC (jobs file)`) || !strings.Contains(r.stdout, "TICK") ||
		!strings.Contains(tickRow, "queued") || !strings.Contains(tickRow, posted[:12]) ||
		strings.Count(r.stdout, "missing") != 3 ||
		!strings.Contains(r.stderr, "3 missing on this page: runonce jobs backfill every --from "+from+" --to "+to) {
		t.Fatalf("jobs ticks = %d\n%s%s\nwant the queued tick's run and three missing, with the backfill command", r.code, r.stdout, r.stderr)
	}
	// Durations before now, as --since takes them.
	if r := runAt(t, base, now, "jobs", "ticks", "every", "--from", "41m", "--json"); r.code != 0 {
		t.Fatalf("jobs ticks --from 41m --json = %d %s", r.code, r.stderr)
	} else {
		var a api.TicksJSON
		if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || len(a.Ticks) != 5 || a.Missing != 3 {
			t.Fatalf("jobs ticks --json: %v %+v; want 5 ticks, 3 missing (and the current one pending)", err, a)
		}
	}

	r = runAt(t, base, now, "jobs", "backfill", "every", "--from", from, "--to", to, "--dry-run")
	if r.code != 0 || strings.Count(r.stdout, "would claim") != 3 || !strings.Contains(r.stdout, "dry run: 3 missing ticks would be claimed") {
		t.Fatalf("jobs backfill --dry-run = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runAt(t, base, now, "jobs", "backfill", "every", "--from", from, "--to", to)
	if r.code != 0 || strings.Count(r.stdout, "claimed") != 4 || !strings.Contains(r.stdout, "claimed 3 of 3 missing ticks") ||
		!strings.Contains(r.stdout, ledger.ScheduledRunID("ns", "every", "every", slot.Add(-40*time.Minute))[:12]) {
		t.Fatalf("jobs backfill = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runAt(t, base, now, "jobs", "ticks", "every", "--from", from, "--to", to); r.code != 0 || strings.Contains(r.stdout, "missing") || r.stderr != "" {
		t.Fatalf("jobs ticks after the backfill = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runAt(t, base, now, "jobs", "run", "every", "--key", "rerun-1", "--payload", `{"x": 1}`)
	id := ledger.KeyedRunID("ns", "every", "rerun-1")
	if r.code != 0 || r.stdout != "run "+id+" started, key rerun-1 (runonce runs show "+id[:12]+")\n" {
		t.Fatalf("jobs run --key = %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runAt(t, base, now, "jobs", "run", "every", "--key", "rerun-1", "--payload", `{"x": 1}`); r.code != 0 || !strings.Contains(r.stdout, "already exists for key rerun-1") {
		t.Fatalf("jobs run with the same key = %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runAt(t, base, now, "jobs", "run", "every"); r.code != 0 || !strings.Contains(r.stdout, "started, key manual:") {
		t.Fatalf("jobs run = %d %q %s", r.code, r.stdout, r.stderr)
	}

	for _, c := range []struct {
		args   []string
		code   int
		saying string
	}{
		{[]string{"jobs", "backfill", "every", "--to", to}, 2, "needs --from and --to"},
		{[]string{"jobs", "ticks", "every", "--from", "yesterday"}, 2, `--from "yesterday" is neither an RFC 3339 time`},
		{[]string{"jobs", "ticks", "no such job"}, 2, "job name"},
		{[]string{"jobs", "ticks"}, 2, "needs a job"},
		{[]string{"jobs", "tick", "every"}, 2, `did you mean "ticks"`},
		{[]string{"jobs", "ticks", "nope"}, 1, "404"},
		{[]string{"jobs", "run", "every", "--key", "a\tb"}, 1, "400"},
	} {
		if r := runAt(t, base, now, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.saying) {
			t.Errorf("%q = %d %q, want exit %d saying %q", c.args, r.code, r.stderr, c.code, c.saying)
		}
	}
}
