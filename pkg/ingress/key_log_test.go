package ingress_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
)

// TestSchedulerHeadersWinOverIdempotencyKey: a request with Cloud Scheduler's headers
// and an Idempotency-Key is keyed by the scheduler's headers (docs/design.md, "The dedup
// key"), and the ingress says so once per job, however many such requests come.
func TestSchedulerHeadersWinOverIdempotencyKey(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }})
	tick := time.Now().UTC().Truncate(time.Minute)
	both := func(key string) map[string]string {
		return map[string]string{"X-CloudScheduler-JobName": "nightly", "X-CloudScheduler-ScheduleTime": tick.Format(time.RFC3339), "Idempotency-Key": key}
	}
	for i, key := range []string{"static", "static", "other"} {
		r := b.do(t, http.MethodPost, "/v1/jobs/report", both(key), "{}")
		if want := ledger.ScheduledRunID("proj/us-central1", "report", "nightly", tick); r.body["run_id"] != want || r.status != http.StatusAccepted {
			t.Fatalf("request %d with both keys = %d %v; want 202 for the tick's run %s", i, r.status, r.body, want)
		}
	}
	b.do(t, http.MethodPost, "/v1/jobs/export", both("static"), "{}")
	b.do(t, http.MethodPost, "/v1/jobs/report", map[string]string{"Idempotency-Key": "alone"}, "{}")
	n := strings.Count(logs.String(), "carries Cloud Scheduler's headers and an Idempotency-Key")
	if n != 2 || !strings.Contains(logs.String(), `"job":"export"`) {
		t.Fatalf("%d warnings for requests with both keys to 2 jobs; want one per job:\n%s", n, logs.String())
	}
}
