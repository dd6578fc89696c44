package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
)

const (
	ns      = "proj/us-central1"
	payload = `{"report":"daily"}`
)

func schedHeaders(name string, t time.Time) map[string]string {
	return map[string]string{
		ingress.HeaderSchedulerJobName:      name,
		ingress.HeaderSchedulerScheduleTime: t.Format(time.RFC3339),
	}
}

// tick is a schedule time safely in the past (a whole minute, as Cloud Scheduler sends).
func tick() time.Time { return time.Now().UTC().Truncate(time.Minute).Add(-time.Minute) }

func acquire(tb testing.TB, l ledger.Driver, runID string, lease time.Duration) *ledger.Run {
	tb.Helper()
	id := ledger.Identity{RunID: runID}
	if r, err := l.Get(context.Background(), &ledger.GetParams{RunID: runID}); err == nil {
		id.PayloadHash = r.PayloadHash // a worker claims with the payload the run was accepted with
	}
	res, err := l.Acquire(context.Background(), &ledger.AcquireParams{
		Identity: id, AttemptID: uuid.NewString(), Lease: lease})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		tb.Fatalf("acquire %s: %v %+v", runID, err, res)
	}
	return res.Run
}

func fence(r *ledger.Run) ledger.Fence {
	return ledger.Fence{RunID: r.ID, Attempt: r.Attempt, AttemptID: r.AttemptID}
}

// TestContract runs one case per row of docs/design.md's "Ingress HTTP contract" table, against
// every ledger backend and the in-process Pub/Sub server.
func TestContract(t *testing.T) {
	t.Parallel()
	st := tick()
	schedID := ledger.ScheduledRunID(ns, "daily-report", "daily-report-job", st)
	type tc struct {
		name string
		cfg  func(*ingress.Config)
		// before runs before the request and returns the messages it published.
		before        func(t *testing.T, b *bundle)
		method, path  string
		hdr           map[string]string
		body          string
		wantStatus    int
		wantBody      map[string]any // the body's fields to compare (error: a substring)
		wantPublished int            // messages stored by Pub/Sub after the request
		wantHeader    map[string]string
	}
	post := func(b *bundle, t *testing.T) reply {
		return b.do(t, http.MethodPost, "/v1/jobs/daily-report", schedHeaders("daily-report-job", st), payload)
	}
	cases := []tc{
		{
			name: "new run claimed and published", method: "POST", path: "/v1/jobs/daily-report",
			hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "queued"}, wantPublished: 1,
			wantHeader: map[string]string{"Location": "/v1/runs/" + schedID},
		},
		{
			name: "same instant at another UTC offset and header case is the same run",
			before: func(t *testing.T, b *bundle) {
				if r := post(b, t); r.status != 202 {
					t.Fatalf("first: %d %v", r.status, r.body)
				}
			},
			method: "POST", path: "/v1/jobs/daily-report", body: payload,
			hdr: map[string]string{
				"x-cloudscheduler-jobname":      "daily-report-job",
				"X-CLOUDSCHEDULER-SCHEDULETIME": st.In(time.FixedZone("PDT", -7*3600)).Format(time.RFC3339),
			},
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "queued", "duplicate": true}, wantPublished: 1,
		},
		{
			name:   "duplicate of a queued run being published is not republished",
			before: func(t *testing.T, b *bundle) { post(b, t) },
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "queued", "duplicate": true}, wantPublished: 1,
		},
		{
			name:   "duplicate of a queued run whose message may be lost is republished",
			before: func(t *testing.T, b *bundle) { post(b, t); b.now.Add(time.Minute) },
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "queued", "duplicate": true}, wantPublished: 2,
		},
		{
			name:   "duplicate of a running run is not republished",
			before: func(t *testing.T, b *bundle) { post(b, t); acquire(t, b.led, schedID, time.Minute) },
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "running", "duplicate": true}, wantPublished: 1,
		},
		{
			name: "duplicate of a running run whose lease expired is republished",
			before: func(t *testing.T, b *bundle) {
				post(b, t)
				acquire(t, b.led, schedID, time.Second)
				b.now.Add(2 * time.Second)
			},
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "running", "duplicate": true}, wantPublished: 2,
		},
		{
			name: "duplicate of a completed run",
			before: func(t *testing.T, b *bundle) {
				post(b, t)
				r := acquire(t, b.led, schedID, time.Minute)
				if _, err := b.led.Complete(context.Background(), &ledger.CompleteParams{Fence: fence(r), Result: []byte(`{"sent":3}`)}); err != nil {
					t.Fatal(err)
				}
			},
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 200, wantBody: map[string]any{"run_id": schedID, "status": "completed", "duplicate": true, "result": map[string]any{"sent": 3.0}}, wantPublished: 1,
		},
		{
			name: "a completed run's record shows its result",
			before: func(t *testing.T, b *bundle) {
				post(b, t)
				r := acquire(t, b.led, schedID, time.Minute)
				if _, err := b.led.Complete(context.Background(), &ledger.CompleteParams{Fence: fence(r), Result: []byte(`{"sent":3}`)}); err != nil {
					t.Fatal(err)
				}
			},
			method: "GET", path: "/v1/runs/" + schedID,
			wantStatus: 200, wantBody: map[string]any{"run_id": schedID, "status": "completed", "result": map[string]any{"sent": 3.0}}, wantPublished: 1,
		},
		{
			name: "duplicate of a failed run, to an operator",
			cfg:  func(c *ingress.Config) { c.Operators = auth.None{} },
			before: func(t *testing.T, b *bundle) {
				post(b, t)
				r := acquire(t, b.led, schedID, time.Minute)
				if _, err := b.led.Fail(context.Background(), &ledger.FailParams{Fence: fence(r), Error: "boom"}); err != nil {
					t.Fatal(err)
				}
			},
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 200, wantBody: map[string]any{"run_id": schedID, "status": "failed", "duplicate": true, "last_error": "boom"}, wantPublished: 1,
		},
		{
			name: "Idempotency-Key", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{"Idempotency-Key": "daily-report:2026-11-01"}, body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": ledger.KeyedRunID(ns, "daily-report", "daily-report:2026-11-01"), "status": "queued"}, wantPublished: 1,
		},
		{
			name: "Idempotency-Key as a structured-field string", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{"idempotency-key": `"daily-report:2026-11-01"`}, body: payload,
			wantStatus: 202, wantBody: map[string]any{"run_id": ledger.KeyedRunID(ns, "daily-report", "daily-report:2026-11-01")}, wantPublished: 1,
		},
		{
			name: "job_key in the JSON body", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{"Content-Type": "application/json; charset=utf-8"},
			body:       `{"job_key":"daily-report:2026-11-01","x":1}`,
			wantStatus: 202, wantBody: map[string]any{"run_id": ledger.KeyedRunID(ns, "daily-report", "daily-report:2026-11-01")}, wantPublished: 1,
		},
		{
			name:   "namespace header replaces the configured namespace",
			cfg:    func(c *ingress.Config) { c.NamespaceHeader = "X-Runonce-Namespace" },
			method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{"Idempotency-Key": "k", "x-runonce-namespace": "other-proj/europe-west1"},
			wantStatus: 202, wantBody: map[string]any{"run_id": ledger.KeyedRunID("other-proj/europe-west1", "daily-report", "k")}, wantPublished: 1,
		},
		{
			name:   "bad namespace header",
			cfg:    func(c *ingress.Config) { c.NamespaceHeader = "X-Runonce-Namespace" },
			method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{"Idempotency-Key": "k", "X-Runonce-Namespace": "a b"},
			wantStatus: 400, wantBody: map[string]any{"error": "namespace header X-Runonce-Namespace"},
		},
		{
			name: "no key at all", method: "POST", path: "/v1/jobs/daily-report", body: "not json",
			wantStatus: 400, wantBody: map[string]any{"error": "no run key: send X-CloudScheduler-JobName and X-CloudScheduler-ScheduleTime"},
		},
		{
			name: "schedule time without job name", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerScheduleTime: st.Format(time.RFC3339)},
			wantStatus: 400, wantBody: map[string]any{"error": "X-CloudScheduler-JobName is missing"},
		},
		{
			name: "job name without schedule time (a forced run) needs an Idempotency-Key", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerJobName: "daily-report-job"},
			wantStatus: 400, wantBody: map[string]any{"error": "X-CloudScheduler-ScheduleTime is missing"},
		},
		{
			name: "lax schedule time is refused", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerJobName: "j", ingress.HeaderSchedulerScheduleTime: "2026-10-16T12:00:00+0000"},
			wantStatus: 400, wantBody: map[string]any{"error": "is not an RFC 3339 time"},
		},
		{
			name: "schedule time with a comma fraction is refused (Go's UnmarshalText accepts it)", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerJobName: "j", ingress.HeaderSchedulerScheduleTime: "2026-10-16T12:00:00,5Z"},
			wantStatus: 400, wantBody: map[string]any{"error": "is not an RFC 3339 time"},
		},
		{
			name: "schedule time with a one-digit hour is refused", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerJobName: "j", ingress.HeaderSchedulerScheduleTime: "2026-10-16T1:00:00Z"},
			wantStatus: 400, wantBody: map[string]any{"error": "is not an RFC 3339 time"},
		},
		{
			name: "schedule time with an offset past 23:59 is refused", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        map[string]string{ingress.HeaderSchedulerJobName: "j", ingress.HeaderSchedulerScheduleTime: "2026-10-16T12:00:00+24:01"},
			wantStatus: 400, wantBody: map[string]any{"error": "is not an RFC 3339 time"},
		},
		{
			name: "schedule time beyond the skew is a forced run", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        schedHeaders("daily-report-job", time.Now().Add(10*time.Minute).UTC().Truncate(time.Minute)),
			wantStatus: 400, wantBody: map[string]any{"error": "looks like a forced run, which reuses the next run's schedule time and would swallow it; start a run now with `runonce jobs run daily-report` (POST /v1/jobs/daily-report:run)"},
		},
		{
			name: "schedule time within the skew is accepted", method: "POST", path: "/v1/jobs/daily-report",
			hdr:        schedHeaders("daily-report-job", time.Now().Add(20*time.Second)),
			wantStatus: 202, wantPublished: 1,
		},
		{
			name: "bad job name", method: "POST", path: "/v1/jobs/bad%20name",
			hdr:        map[string]string{"Idempotency-Key": "k"},
			wantStatus: 400, wantBody: map[string]any{"error": "bad job name in path"},
		},
		{
			name: "job name too long", method: "POST", path: "/v1/jobs/" + strings.Repeat("j", 129),
			hdr:        map[string]string{"Idempotency-Key": "k"},
			wantStatus: 400, wantBody: map[string]any{"error": "the limit is 128"},
		},
		{
			name: "repeated scheduler header", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{
				ingress.HeaderSchedulerJobName: "a", "x-cloudscheduler-jobname": "b",
				ingress.HeaderSchedulerScheduleTime: st.Format(time.RFC3339),
			},
			wantStatus: 400, wantBody: map[string]any{"error": "is sent 2 times"},
		},
		{
			name: "job_key not a string", method: "POST", path: "/v1/jobs/daily-report", body: `{"job_key":7}`,
			hdr:        map[string]string{"Content-Type": "application/json"},
			wantStatus: 400, wantBody: map[string]any{"error": `"job_key" must be a string`},
		},
		{
			name: "job_key in a body not declared JSON", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{"Content-Type": "text/plain"}, body: `{"job_key":"daily-report:2026-11-01"}`,
			wantStatus: 400, wantBody: map[string]any{"error": `the body has a "job_key" field, but Content-Type "text/plain" is not application/json`},
		},
		{
			name: "job_key in a body without a Content-Type", method: "POST", path: "/v1/jobs/daily-report",
			body:       `{"job_key":"daily-report:2026-11-01"}`,
			wantStatus: 400, wantBody: map[string]any{"error": `the body has a "job_key" field, but the request has no Content-Type`},
		},
		{
			name: "a JSON body without job_key is not a key", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{"Content-Type": "application/json"}, body: `{"x":1}`,
			wantStatus: 400, wantBody: map[string]any{"error": "no run key"},
		},
		{
			name: "Cloud Scheduler's default octet-stream body with its headers", method: "POST", path: "/v1/jobs/daily-report",
			hdr: map[string]string{
				ingress.HeaderSchedulerJobName: "daily-report-job", ingress.HeaderSchedulerScheduleTime: st.Format(time.RFC3339),
				"Content-Type": "application/octet-stream",
			},
			body:       `{"job_key":"ignored: the scheduler's headers key the run"}`,
			wantStatus: 202, wantBody: map[string]any{"run_id": schedID, "status": "queued"}, wantPublished: 1,
		},
		{
			name: "unknown job with a jobs file", cfg: func(c *ingress.Config) { c.Jobs, c.AcceptAnyJob = []string{"other"}, false },
			method: "POST", path: "/v1/jobs/daily-report", hdr: map[string]string{"Idempotency-Key": "k"},
			wantStatus: 404, wantBody: map[string]any{"error": `unknown job "daily-report": the jobs file does not name it (this ingress accepts other)`},
		},
		{
			name: "known job with a jobs file", cfg: func(c *ingress.Config) { c.Jobs, c.AcceptAnyJob = []string{"daily-report"}, false },
			method: "POST", path: "/v1/jobs/daily-report", hdr: map[string]string{"Idempotency-Key": "k"},
			wantStatus: 202, wantPublished: 1,
		},
		{
			name: "body over the limit", cfg: func(c *ingress.Config) { c.MaxBody = 16 },
			method: "POST", path: "/v1/jobs/daily-report", hdr: map[string]string{"Idempotency-Key": "k"},
			body: strings.Repeat("x", 17), wantStatus: 413, wantBody: map[string]any{"error": "larger than the limit of 16 bytes"},
		},
		{
			name: "body at the limit", cfg: func(c *ingress.Config) { c.MaxBody = 16 },
			method: "POST", path: "/v1/jobs/daily-report", hdr: map[string]string{"Idempotency-Key": "k"},
			body: strings.Repeat("x", 16), wantStatus: 202, wantPublished: 1,
		},
		{
			name:   "same key, different payload",
			before: func(t *testing.T, b *bundle) { post(b, t) },
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: `{"report":"weekly"}`,
			wantStatus: 422, wantBody: map[string]any{"run_id": schedID, "error": "exists with another payload"}, wantPublished: 1,
		},
		{
			name: "ledger unavailable",
			before: func(t *testing.T, b *bundle) {
				err := fmt.Errorf("%w: injected", ledger.ErrUnavailable)
				b.led.failClaim.Store(&err)
			},
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 503, wantBody: map[string]any{"error": "the ledger is unavailable"},
			wantHeader: map[string]string{"Retry-After": "5"},
		},
		{
			name:   "Pub/Sub unavailable",
			before: func(t *testing.T, b *bundle) { b.pub.fail.Store(true) },
			method: "POST", path: "/v1/jobs/daily-report", hdr: schedHeaders("daily-report-job", st), body: payload,
			wantStatus: 503, wantBody: map[string]any{"error": "Pub/Sub is unavailable; the run is claimed and will be republished"},
			wantHeader: map[string]string{"Retry-After": "5"},
		},
		{
			name: "wrong method", method: "GET", path: "/v1/jobs/daily-report",
			wantStatus: 405, wantHeader: map[string]string{"Allow": "POST"}, wantBody: map[string]any{"error": "use POST"},
		},
		{
			name:   "get a run",
			before: func(t *testing.T, b *bundle) { post(b, t) },
			method: "GET", path: "/v1/runs/" + schedID, wantPublished: 1,
			wantStatus: 200, wantBody: map[string]any{"run_id": schedID, "status": "queued", "job": "daily-report",
				"namespace": ns, "key": "daily-report-job", "schedule_time": st.Format(time.RFC3339)},
		},
		{
			name: "get an unknown run", method: "GET", path: "/v1/runs/" + strings.Repeat("0", 64),
			wantStatus: 404, wantBody: map[string]any{"error": "no run"},
		},
		{
			name: "get a malformed run ID", method: "GET", path: "/v1/runs/xyz",
			wantStatus: 400, wantBody: map[string]any{"error": "neither 64 lower-case hex digits nor a prefix of at least 6 of them"},
		},
		{name: "healthz", method: "GET", path: "/healthz", wantStatus: 200, wantBody: map[string]any{"status": "ok"}},
		{name: "readyz", method: "GET", path: "/readyz", wantStatus: 200, wantBody: map[string]any{"ledger": "ok", "topic": "ok"}},
		{
			name:   "readyz when Pub/Sub is down",
			before: func(t *testing.T, b *bundle) { b.pub.fail.Store(true) },
			method: "GET", path: "/readyz", wantStatus: 503, wantBody: map[string]any{"ledger": "ok", "topic": "unavailable", "error": "not ready"},
		},
		{name: "unknown path", method: "GET", path: "/nope", wantStatus: 404, wantBody: map[string]any{"error": "no such endpoint"}},
	}
	for bi, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					b := setup(t, setupOpts{backend: bi, cfg: c.cfg})
					if c.before != nil {
						c.before(t, b)
					}
					r := b.do(t, c.method, c.path, c.hdr, c.body)
					if r.status != c.wantStatus {
						t.Fatalf("status %d, want %d; body %v", r.status, c.wantStatus, r.body)
					}
					checkBody(t, r.body, c.wantBody)
					for k, v := range c.wantHeader {
						if got := r.header.Get(k); got != v {
							t.Errorf("header %s = %q, want %q", k, got, v)
						}
					}
					if got := r.header.Get("Content-Type"); got != "application/json" {
						t.Errorf("Content-Type %q", got)
					}
					if got := b.published(); got != c.wantPublished {
						t.Errorf("published %d messages, want %d", got, c.wantPublished)
					}
				})
			}
		})
	}
}

// checkBody compares the fields of want with got; an "error" is a substring.
func checkBody(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("body has no %q: %v", k, got)
			continue
		}
		if ws, isStr := w.(string); isStr && (k == "error" || k == "topic" || k == "ledger") {
			if gs, _ := g.(string); !strings.Contains(gs, ws) {
				t.Errorf("body %s = %q, want it to contain %q", k, gs, ws)
			}
			continue
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("body %s (-want +got):\n%s", k, diff)
		}
	}
	if _, isErr := want["error"]; !isErr && got["error"] != nil {
		t.Errorf("unexpected error %v", got["error"])
	}
}

// TestMessage checks what a new run publishes: the identity in attributes, the payload
// unchanged, the trace context carried.
func TestMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	st := tick()
	hdr := schedHeaders("nightly", st)
	hdr["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := b.do(t, "POST", "/v1/jobs/etl", hdr, payload)
	if r.status != 202 {
		t.Fatalf("%d %v", r.status, r.body)
	}
	msgs := b.ps.Server.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	m, err := queue.Decode(msgs[0].Attributes, msgs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Identity{
		RunID: ledger.ScheduledRunID(ns, "etl", "nightly", st), Namespace: ns, Job: "etl", Key: "nightly",
		ScheduleTime: st, PayloadHash: ledger.PayloadHash([]byte(payload)), Payload: []byte(payload),
	}
	if diff := cmp.Diff(want, m.Identity); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}
	if string(m.Data()) != payload {
		t.Errorf("payload %q", m.Data())
	}
	if m.Traceparent != hdr["traceparent"] {
		t.Errorf("traceparent %q, want %q", m.Traceparent, hdr["traceparent"])
	}
	if m.EnqueuedAt.IsZero() {
		t.Error("no enqueued_at")
	}
}

// TestConcurrentIdentical: 64 identical requests at once (mixed header case, several UTC
// offsets for the same instant) make one claim and one message, and all get 2xx with
// one run ID.
func TestConcurrentIdentical(t *testing.T) {
	t.Parallel()
	for bi, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{backend: bi, quiet: true})
			st := tick()
			zones := []*time.Location{time.UTC, time.FixedZone("PDT", -7*3600), time.FixedZone("IST", 5*3600+1800), time.FixedZone("NPT", 5*3600+2700)}
			names := []string{"X-CloudScheduler-JobName", "x-cloudscheduler-jobname", "X-CLOUDSCHEDULER-JOBNAME", "X-Cloudscheduler-Jobname"}
			times := []string{"X-CloudScheduler-ScheduleTime", "x-cloudscheduler-scheduletime", "X-CLOUDSCHEDULER-SCHEDULETIME"}
			const n = 64
			var wg sync.WaitGroup
			replies := make([]reply, n)
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					hdr := map[string]string{
						names[i%len(names)]: "every-minute",
						times[i%len(times)]: st.In(zones[i%len(zones)]).Format(time.RFC3339),
					}
					<-start
					replies[i] = b.do(t, "POST", "/v1/jobs/report", hdr, payload)
				})
			}
			close(start)
			wg.Wait()
			ids := map[string]int{}
			news := 0
			for i, r := range replies {
				if r.status != 202 {
					t.Errorf("request %d: %d %v", i, r.status, r.body)
				}
				id, _ := r.body["run_id"].(string)
				ids[id]++
				if r.body["duplicate"] == nil {
					news++
				}
			}
			if len(ids) != 1 || news != 1 {
				t.Errorf("run IDs %v, %d answers not duplicate; want one ID and one new", ids, news)
			}
			if got := b.led.created.Load(); got != 1 {
				t.Errorf("%d claims created the run, want 1", got)
			}
			if got := b.published(); got != 1 {
				t.Errorf("%d messages published, want 1", got)
			}
		})
	}
}

// TestPublishFailureKeepsClaim: a failed publish answers 503 and keeps the claim, made
// due now, so that the scheduler's retry republishes it at once.
func TestPublishFailureKeepsClaim(t *testing.T) {
	t.Parallel()
	for bi, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{backend: bi})
			hdr := schedHeaders("j", tick())
			b.pub.fail.Store(true)
			r := b.do(t, "POST", "/v1/jobs/report", hdr, payload)
			if r.status != 503 || r.header.Get("Retry-After") == "" {
				t.Fatalf("%d %v %v", r.status, r.header, r.body)
			}
			id, _ := r.body["run_id"].(string)
			run, err := b.led.Driver.Get(context.Background(), &ledger.GetParams{RunID: id})
			if err != nil {
				t.Fatalf("the claim was not kept: %v", err)
			}
			if run.Status != ledger.StatusQueued || run.Deadline.After(time.Now()) {
				t.Fatalf("kept claim = %s with deadline %v, want queued and due now", run.Status, run.Deadline)
			}
			if b.led.expedites.Load() != 1 {
				t.Errorf("%d expedites, want 1", b.led.expedites.Load())
			}
			b.pub.fail.Store(false)
			r = b.do(t, "POST", "/v1/jobs/report", hdr, payload)
			if r.status != 202 || r.body["duplicate"] != true || r.body["run_id"] != id {
				t.Fatalf("retry: %d %v, want 202 duplicate of %s", r.status, r.body, id)
			}
			if b.published() != 1 {
				t.Errorf("%d published after the retry, want 1 (the retry republishes the due claim)", b.published())
			}
		})
	}
}

// TestDuplicateDuringFailedPublishKeepsItsPromise: request A claims a new run and is
// publishing; duplicate B arrives and is answered 202 (without a publish, the run is
// young); then A's publish fails and A answers 503. B's caller stops retrying, so the run
// must still be there, and due for republishing: before, A deleted its claim and the run
// was lost with nothing left for any rescuer to find.
func TestDuplicateDuringFailedPublishKeepsItsPromise(t *testing.T) {
	t.Parallel()
	type target struct {
		name string
		opts setupOpts
	}
	var targets []target
	for bi, be := range backends {
		targets = append(targets, target{be.name, setupOpts{backend: bi}})
	}
	for _, sb := range serviceBackends() {
		targets = append(targets, target{sb.name, setupOpts{open: sb.open, namespace: "promise/" + strings.ReplaceAll(randomSuffix(), ".", "")}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tg.opts)
			publishing, bAnswered := make(chan struct{}), make(chan struct{})
			var once sync.Once
			b.pub.gate = func() {
				once.Do(func() { // only A's publish waits, then fails
					close(publishing)
					<-bAnswered
					b.pub.fail.Store(true)
				})
			}
			hdr := map[string]string{"Idempotency-Key": "promise-" + randomSuffix()}
			aDone := make(chan reply, 1)
			go func() { aDone <- b.do(t, "POST", "/v1/jobs/report", hdr, payload) }()
			<-publishing // A's claim landed; B is a duplicate that arrives while A publishes
			rb := b.do(t, "POST", "/v1/jobs/report", hdr, payload)
			close(bAnswered)
			ra := <-aDone
			if rb.status != 202 || rb.body["duplicate"] != true {
				t.Fatalf("B = %d %v, want 202 duplicate", rb.status, rb.body)
			}
			if ra.status != 503 {
				t.Fatalf("A = %d %v, want 503 (its publish failed)", ra.status, ra.body)
			}
			id := rb.body["run_id"].(string)
			run, err := b.led.Driver.Get(context.Background(), &ledger.GetParams{RunID: id})
			if err != nil {
				t.Fatalf("B was answered 202 for run %s, but the run is gone: %v", id, err)
			}
			if run.Status != ledger.StatusQueued || run.Deadline.After(time.Now()) {
				t.Fatalf("run = %s with deadline %v, want queued and due now for the rescuer", run.Status, run.Deadline)
			}
			// The retry A's caller makes republishes it at once.
			b.pub.fail.Store(false)
			if r := b.do(t, "POST", "/v1/jobs/report", hdr, payload); r.status != 202 || b.published() != 1 {
				t.Fatalf("A's retry = %d %v with %d messages, want 202 and one message", r.status, r.body, b.published())
			}
		})
	}
}

// /readyz is unauthenticated: it names what is down, never the backend's error text.
func TestReadyzLeaksNoBackendError(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	secret := errors.New("dial tcp db-primary.internal:5432: password authentication failed for user runonce")
	b.led.failClaim.Store(&secret)
	b.pub.fail.Store(true)
	r := b.do(t, "GET", "/readyz", nil, "")
	if r.status != 503 || r.body["ledger"] != "unavailable" || r.body["topic"] != "unavailable" {
		t.Fatalf("readyz = %d %v, want 503 naming the ledger and the topic unavailable", r.status, r.body)
	}
	if raw := fmt.Sprint(r.body); strings.Contains(raw, "db-primary") || strings.Contains(raw, "injected") {
		t.Fatalf("readyz leaks backend error text: %v", r.body)
	}
}

// TestPublishFailureOfRealServer injects the failure into the Pub/Sub server itself.
func TestPublishFailureOfRealServer(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{psOpts: []pstest.ServerReactorOption{
		pstest.WithErrorInjection("Publish", codes.PermissionDenied, "injected")}})
	r := b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "k1"}, payload)
	if r.status != 503 {
		t.Fatalf("%d %v", r.status, r.body)
	}
	if b.led.expedites.Load() != 1 {
		t.Errorf("%d expedites, want 1", b.led.expedites.Load())
	}
}

// TestCosts: a new run costs one ledger round trip and one publish; a duplicate of a
// completed run one ledger call that reads (the claim writes nothing) and no publish.
func TestCosts(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	hdr := map[string]string{"Idempotency-Key": "cost"}
	r := b.do(t, "POST", "/v1/jobs/report", hdr, payload)
	got := [3]int64{b.led.claims.Load(), b.led.gets.Load() + b.led.expedites.Load(), b.pub.publishes.Load()}
	if r.status != 202 || got != [3]int64{1, 0, 1} {
		t.Fatalf("new run: %d; claims, other ledger calls, publishes = %v, want [1 0 1]", r.status, got)
	}
	id := r.body["run_id"].(string)
	run := acquire(t, b.led.Driver, id, time.Minute)
	if _, err := b.led.Driver.Complete(context.Background(), &ledger.CompleteParams{Fence: fence(run)}); err != nil {
		t.Fatal(err)
	}
	before, err := b.led.Driver.Get(context.Background(), &ledger.GetParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	r = b.do(t, "POST", "/v1/jobs/report", hdr, payload)
	got = [3]int64{b.led.claims.Load(), b.led.gets.Load() + b.led.expedites.Load(), b.pub.publishes.Load()}
	if r.status != 200 || got != [3]int64{2, 0, 1} {
		t.Fatalf("duplicate: %d; claims, other ledger calls, publishes = %v, want [2 0 1]", r.status, got)
	}
	after, err := b.led.Driver.Get(context.Background(), &ledger.GetParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the duplicate's claim wrote the record (-before +after):\n%s", diff)
	}
}

// TestMetricsAndLogs: /metrics shows requests by outcome and the latency histograms;
// the log line names run_id, job and outcome, never the payload, and escapes control
// characters from the caller.
func TestMetricsAndLogs(t *testing.T) {
	t.Parallel()
	m, err := obs.NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) {
		c.Meter = m.Meter("test")
		c.Metrics = m.Handler()
		c.Logger = obs.NewLogger(&logs, -4)
	}})
	secret := "s3cr3t-payload"
	b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "k"}, secret)
	b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "k"}, secret)
	b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "bad\x80key"}, secret)
	b.do(t, "POST", "/v1/jobs/report", map[string]string{"Content-Type": "application/json"}, `{"job_key":"line\nbreak\u202e"}`)
	resp, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(raw)
	for _, want := range []string{
		`runonce_ingress_requests_total{outcome="new"} 1`,
		`runonce_ingress_requests_total{outcome="duplicate",run_status="queued"} 1`,
		`runonce_ingress_requests_total{outcome="bad_request"} 2`,
		`runonce_ingress_claim_duration_seconds_bucket{result="ok",le="0.001"}`,
		`runonce_ingress_publish_duration_seconds_count{result="ok"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	l := logs.String()
	if strings.Contains(l, secret) {
		t.Error("the payload was logged")
	}
	for _, want := range []string{`"severity":"INFO"`, `"outcome":"new"`, `"run_id":"`, `"job":"report"`, `"message":"job request"`, `line\\nbreak\\u202e`} {
		if !strings.Contains(l, want) {
			t.Errorf("logs lack %s:\n%s", want, l)
		}
	}
}

// TestRunJSONFinishedAt: a finished run (completed, failed or cancelled) carries
// finished_at and nothing under completed_at, its old name, which misled for a failed or
// cancelled run.
func TestRunJSONFinishedAt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 6, 0, 1, 0, time.UTC)
	for _, s := range []ledger.Status{ledger.StatusCompleted, ledger.StatusFailed, ledger.StatusCancelled} {
		b, err := json.Marshal(api.NewRunJSON(&ledger.Run{ID: strings.Repeat("a", 64), Status: s, CompletedAt: at}))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if _, old := got["completed_at"]; got["finished_at"] != "2026-11-30T06:00:01Z" || old {
			t.Errorf("a %s run: finished_at %v, completed_at %v; want finished_at 2026-11-30T06:00:01Z alone", s, got["finished_at"], got["completed_at"])
		}
	}
	b, _ := json.Marshal(api.NewRunJSON(&ledger.Run{ID: strings.Repeat("a", 64), Status: ledger.StatusQueued}))
	if strings.Contains(string(b), "finished_at") {
		t.Errorf("an unfinished run has finished_at: %s", b)
	}
}

// TestUnknownJobsAreRefusedUnlessAnyIsAccepted: a 2xx promises a run that ends completed
// or failed, so an ingress does not accept a job it does not know (a typo) unless told
// to accept any: New refuses a Config that lists no jobs and does not say so, and a
// job the list does not name is 404.
func TestUnknownJobsAreRefusedUnlessAnyIsAccepted(t *testing.T) {
	t.Parallel()
	led := memory.New(nil)
	pub := &flakyPublisher{}
	for _, c := range []struct {
		name string
		cfg  ingress.Config
		want string
	}{
		{"no jobs and no AcceptAnyJob", ingress.Config{}, "Config.Jobs is nil: list the jobs this ingress accepts"},
		{"jobs and AcceptAnyJob", ingress.Config{Jobs: []string{"a"}, AcceptAnyJob: true}, "both set"},
	} {
		c.cfg.Ledger, c.cfg.Publisher, c.cfg.Auth = ledger.New(led, nil), pub, auth.None{}
		if _, err := ingress.New(&c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	key := map[string]string{"Idempotency-Key": "k"}
	none := setup(t, setupOpts{cfg: func(c *ingress.Config) { c.Jobs, c.AcceptAnyJob = []string{}, false }})
	if r := none.do(t, http.MethodPost, "/v1/jobs/daily-reprot", key, "{}"); r.status != http.StatusNotFound || !strings.Contains(r.body["error"].(string), `unknown job "daily-reprot"`) {
		t.Errorf("a job of an ingress that accepts none = %d %v, want 404 naming it", r.status, r.body)
	}
	listed := setup(t, setupOpts{cfg: func(c *ingress.Config) { c.Jobs, c.AcceptAnyJob = []string{"daily-report"}, false }})
	if r := listed.do(t, http.MethodPost, "/v1/jobs/daily-reprot", key, "{}"); r.status != http.StatusNotFound || !strings.Contains(r.body["error"].(string), "accepts daily-report") {
		t.Errorf("a typo of a listed job = %d %v, want 404 listing the jobs", r.status, r.body)
	}
	if listed.published() != 0 || none.published() != 0 {
		t.Error("a refused job was published")
	}
	anyJob := setup(t, setupOpts{})
	if r := anyJob.do(t, http.MethodPost, "/v1/jobs/daily-reprot", key, "{}"); r.status != http.StatusAccepted {
		t.Errorf("a job of an ingress that accepts any = %d %v, want 202", r.status, r.body)
	}
}
