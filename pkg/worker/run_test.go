package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

// syncBuffer is a log sink several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A delivery of a job this worker has no handler for is not an attempt: before, each
// one claimed the run (an attempt) and released it, so a run of a job a worker did not
// know yet (a rolling deploy) burnt all its attempts in a fraction of a second and
// failed for good, with nothing logged.
func TestDeliveryOfAJobWithoutHandlerIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{MaxAttempts: 2, NoHandlerDelay: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	b.mux.HandleFunc("known", func(context.Context, *worker.Job) error { return nil })
	m := message("unknown", "k", "{}")
	// The ingress claimed the run.
	if _, err := mem.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		start := time.Now()
		v := b.process(m)
		if v.Ack || v.Outcome != worker.OutcomeNoHandler {
			t.Fatalf("delivery %d = %+v, want nacked as no_handler", i+1, v)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Fatalf("delivery %d nacked after %v, want after the NoHandlerDelay (20ms)", i+1, d)
		}
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("after 5 deliveries to a worker without the job, the run is %s at attempt %d; want queued, no attempt", r.Status, r.Attempt)
	}
	if !strings.Contains(logs.String(), "no handler for this job") || !strings.Contains(logs.String(), `"job":"unknown"`) {
		t.Fatalf("nothing logged about the job without a handler:\n%s", logs.String())
	}
	// A worker that has the handler runs it, as its first attempt.
	b.mux.HandleFunc("unknown", func(context.Context, *worker.Job) error { return nil })
	if v := b.process(m); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("once the handler is registered: %+v", v)
	}
	if r := b.run(m.Identity.RunID); r.Attempt != 1 {
		t.Fatalf("completed at attempt %d, want 1", r.Attempt)
	}
}

// router is a Handler that is not a *Mux: a middleware around a mux that forwards its
// policy.
type router struct{ *worker.Mux }

func (r router) HandleJob(ctx context.Context, j *worker.Job) error { return r.Mux.HandleJob(ctx, j) }

// Per-job policy reaches the worker through the Router interface: before, the worker
// asked only a *Mux, so a middleware around the mux dropped the job's bounds.
func TestPolicyOfAHandlerThatIsNotAMux(t *testing.T) {
	t.Parallel()
	mux := worker.NewMux()
	mux.HandleWith("once", worker.HandlerFunc(func(context.Context, *worker.Job) error { return errors.New("boom") }),
		&worker.HandleOptions{MaxAttempts: 1})
	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: router{mux}, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.CancelJobs)
	v := w.Process(t.Context(), &queue.Delivery{Message: message("once", "k", "{}"), PublishTime: time.Now()})
	if !v.Ack || v.Outcome != worker.OutcomeFailed {
		t.Fatalf("a job with max attempts 1 that failed = %+v, want failed for good", v)
	}
}

// inProcessSub returns a subscriber of a fresh in-process subscription with the given
// message retention (0: Pub/Sub's default) and the publisher of its topic.
func inProcessSub(t *testing.T, retention time.Duration) (*queue.Subscriber, *queue.Publisher) {
	t.Helper()
	ps, err := pubsubtest.NewInProcess(t.Context(), "proj")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(t.Context(), ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	tmpl := &pubsubpb.Subscription{AckDeadlineSeconds: 10}
	if retention > 0 {
		tmpl.MessageRetentionDuration = durationpb.New(retention)
	}
	if _, err := queue.EnsureSubscription(t.Context(), ps.Client, "runs", "runs-worker", tmpl); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	t.Cleanup(func() { pub.Close() })
	return queue.NewSubscriber(ps.Client, "runs-worker", nil), pub
}

// New checks what internal/app used to check, so that a worker binary of a user's own
// gets it too: the retention outlasts the subscription's message retention, the
// scheduler's retry window and the longest job; and it sizes the ack extension.
func TestNewChecksTheRetentionAgainstTheSubscription(t *testing.T) {
	t.Parallel()
	sub, _ := inProcessSub(t, 3*24*time.Hour)
	mux := worker.NewMux()
	mux.HandleWith("long", worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil }), &worker.HandleOptions{MaxRunTime: 3 * time.Hour})
	cfg := worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: mux, Subscriber: sub, Retention: 4*24*time.Hour + 2*time.Hour}
	if _, err := worker.New(&cfg); !errors.Is(err, worker.ErrRetentionTooShort) || !strings.Contains(err.Error(), "use at least 99h0m0s") {
		t.Fatalf("New with a retention shorter than 3d + 1d + the 3h job: %v, want ErrRetentionTooShort naming 99h", err)
	}
	cfg.Retention = 99 * time.Hour
	w, err := worker.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.MaxExtension(); got != 6*time.Hour {
		t.Fatalf("MaxExtension = %v, want twice the longest job (6h)", got)
	}
	// Without a subscriber, the push subscription's retention (Pub/Sub's default, 7d).
	if _, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: mux, Retention: 8 * 24 * time.Hour}); !errors.Is(err, worker.ErrRetentionTooShort) {
		t.Fatalf("New without a subscriber, retention 8d: %v, want ErrRetentionTooShort", err)
	}
}

// Run pulls, runs the job and, once its context ends, returns.
func TestRunPullsUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	sub, pub := inProcessSub(t, 0)
	mem := memory.New(nil)
	mux := worker.NewMux()
	done := make(chan string, 1)
	mux.HandleFunc("job", func(_ context.Context, j *worker.Job) error { done <- string(j.Payload); return nil })
	w, err := worker.New(&worker.Config{Ledger: ledger.New(mem, nil), Handler: mux, Subscriber: sub, Republish: pub, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	m := message("job", "k", `{"x":1}`)
	if _, err := pub.Publish(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-done:
		if p != `{"x":1}` {
			t.Fatalf("payload %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run")
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if err := w.Run(t.Context()); !errors.Is(err, worker.ErrRunning) {
		t.Fatalf("a second Run: %v, want ErrRunning", err)
	}
}

func pushBody(m *queue.Message) io.Reader {
	env, _ := json.Marshal(map[string]any{"subscription": "projects/p/subscriptions/s", "message": map[string]any{
		"attributes": m.Attributes(), "data": base64.StdEncoding.EncodeToString(m.Data()), "messageId": m.Identity.Key,
		"publishTime": time.Now().Format(time.RFC3339Nano)}})
	return bytes.NewReader(env)
}

// Push deliveries get the grace from Run, as pulled ones do: when Run's context ends, a
// running push job has the grace, is then cancelled and its run released (the push is
// answered 503, so Pub/Sub redelivers it), Run returns only after that, and a push that
// arrives meanwhile is refused.
func TestRunGivesPushDeliveriesTheGrace(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	mux := worker.NewMux()
	started := make(chan struct{})
	mux.HandleFunc("long", func(ctx context.Context, _ *worker.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	mux.HandleFunc("job", func(context.Context, *worker.Job) error { return nil })
	const grace = 300 * time.Millisecond
	w, err := worker.New(&worker.Config{Ledger: ledger.New(mem, nil), Handler: mux, Grace: grace, PushAuth: worker.NoAuth})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	m := message("long", "k", "{}")
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/v1/push", "application/json", pushBody(m))
		if err != nil {
			t.Error(err)
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-started
	stopAt := time.Now()
	cancel()
	time.Sleep(50 * time.Millisecond) // the stop is seen
	resp, err := http.Post(srv.URL+"/v1/push", "application/json", pushBody(message("job", "late", "{}")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a push while stopping = %d, want 503", resp.StatusCode)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(stopAt); d < grace {
		t.Fatalf("Run returned %v after its context ended, before the %v grace was over", d, grace)
	}
	if code := <-answered; code != http.StatusServiceUnavailable {
		t.Fatalf("the push cut off by the shutdown = %d, want 503 (Pub/Sub redelivers it)", code)
	}
	r, err := mem.Get(t.Context(), &ledger.GetParams{RunID: m.Identity.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "shutting down") {
		t.Fatalf("run = %s %q, want released by the shutdown", r.Status, r.LastError)
	}
}

// failingSub is a subscription that cannot be reached.
type failingSub struct{ *queue.Subscriber }

func (failingSub) Ping(context.Context) error { return errors.New("subscription 10.0.0.7 unreachable") }

func TestHandlerServesReadiness(t *testing.T) {
	t.Parallel()
	sub, _ := inProcessSub(t, 0)
	for _, c := range []struct {
		name string
		sub  worker.Subscriber
		want int
	}{{"ready", sub, http.StatusOK}, {"subscription unreachable", failingSub{sub}, http.StatusServiceUnavailable}} {
		w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: worker.NewMux(), Subscriber: c.sub})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != c.want || strings.Contains(rec.Body.String(), "10.0.0.7") {
			t.Errorf("%s: /readyz = %d %q, want %d without the backend's error", c.name, rec.Code, rec.Body.String(), c.want)
		}
		rec = httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/push", nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s: push without Config.PushAuth = %d, want 404 (not served)", c.name, rec.Code)
		}
	}
}

// TestPushRefusalsAreJSONLines: the push endpoint's refusals are {"error": …} naming the
// problem, on one line ending with a newline, as every JSON answer of the ingress and
// the worker.
func TestPushRefusalsAreJSONLines(t *testing.T) {
	t.Parallel()
	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: worker.NewMux(), PushAuth: worker.NoAuth})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, body string
		status       int
		error        string
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed, "POST a Pub/Sub push envelope"},
		{http.MethodPost, "not an envelope", http.StatusBadRequest, ""},
	} {
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest(c.method, "/v1/push", strings.NewReader(c.body)))
		var body struct{ Error string }
		if rec.Code != c.status || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error == "" || !strings.Contains(body.Error, c.error) ||
			!strings.HasSuffix(rec.Body.String(), "}\n") || rec.Header().Get("Content-Type") != "application/json" ||
			rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s /v1/push = %d %q (%s); want %d, JSON naming %q, ending with a newline, nosniff",
				c.method, rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), c.status, c.error)
		}
	}
}
