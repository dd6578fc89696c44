package worker_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

type bundle struct {
	t      *testing.T
	ledger ledger.Driver
	mux    *worker.Mux
	w      *worker.Worker
	cfg    worker.Config
	ps     *pubsubtest.InProcess
	pub    *queue.Publisher
	sub    *queue.Subscriber
}

func setup(t *testing.T, l ledger.Driver, cfg *worker.Config) *bundle {
	t.Helper()
	if l == nil {
		l = memory.New(nil)
	}
	b := &bundle{t: t, ledger: l, mux: worker.NewMux()}
	c := worker.Config{Lease: 600 * time.Millisecond, MaxAttempts: 3}
	if cfg != nil {
		c = *cfg
	}
	c.Ledger, c.Handler = ledger.New(l, nil), b.mux
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	b.cfg = c
	b.rebuild(nil)
	return b
}

// rebuild replaces the bundle's worker with one of its config changed by edit.
func (b *bundle) rebuild(edit func(c *worker.Config)) {
	b.t.Helper()
	c := b.cfg
	if edit != nil {
		edit(&c)
	}
	w, err := worker.New(&c)
	if err != nil {
		b.t.Fatal(err)
	}
	b.w = w
	b.t.Cleanup(w.CancelJobs)
}

// pushServer serves the worker's Handler with push behind authn and returns the push
// endpoint's URL.
func (b *bundle) pushServer(authn func(http.Handler) http.Handler) string {
	b.rebuild(func(c *worker.Config) { c.PushAuth = authn })
	srv := httptest.NewServer(b.w.Handler())
	b.t.Cleanup(srv.Close)
	return srv.URL + "/v1/push"
}

// withQueue adds an in-process Pub/Sub with a topic and a pull subscription.
func (b *bundle) withQueue() *bundle {
	ctx := b.t.Context()
	ps, err := pubsubtest.NewInProcess(ctx, "proj")
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		b.t.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, "runs", "runs-worker", nil); err != nil {
		b.t.Fatal(err)
	}
	b.ps = ps
	b.pub = queue.NewPublisher(ps.Client, "runs", nil)
	b.t.Cleanup(func() { b.pub.Close() })
	b.sub = queue.NewSubscriber(ps.Client, "runs-worker", &queue.SubscriberOptions{Concurrency: 8, ShutdownTimeout: 3 * time.Second})
	return b
}

// pull runs a worker pulling from the bundle's subscription until the test ends or stop
// is called.
func (b *bundle) pull(grace time.Duration) (stop func()) {
	b.rebuild(func(c *worker.Config) { c.Subscriber, c.Grace = b.sub, grace })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := b.w
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.t.Errorf("Run: %v", err)
			}
		})
	}
	b.t.Cleanup(stop)
	return stop
}

func message(job, key string, payload string) *queue.Message {
	return &queue.Message{
		Identity: ledger.Identity{
			RunID: ledger.KeyedRunID("ns", job, key), Namespace: "ns", Job: job, Key: key,
			PayloadHash: ledger.PayloadHash([]byte(payload)), Payload: []byte(payload),
		},
		EnqueuedAt: time.Now(),
	}
}

func (b *bundle) process(m *queue.Message) worker.Verdict {
	return b.w.Process(b.t.Context(), &queue.Delivery{Message: m, PublishTime: time.Now()})
}

func (b *bundle) run(id string) *ledger.Run {
	b.t.Helper()
	r, err := b.ledger.Get(b.t.Context(), &ledger.GetParams{RunID: id})
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *bundle) waitStatus(id string, want ledger.Status, within time.Duration) *ledger.Run {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := b.ledger.Get(b.t.Context(), &ledger.GetParams{RunID: id})
		if err == nil && r.Status == want {
			return r
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("run %s is %v (%v) after %v, want %s", id[:8], r, err, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		handler    func(ctx context.Context, j *worker.Job) error
		wantAck    bool
		wantOut    string
		wantStatus ledger.Status
		wantErr    string
	}{
		{"NilCompletes", func(context.Context, *worker.Job) error { return nil }, true, worker.OutcomeCompleted, ledger.StatusCompleted, ""},
		{"PermanentFails", func(context.Context, *worker.Job) error { return worker.Permanent(errors.New("bad invoice")) },
			true, worker.OutcomeFailed, ledger.StatusFailed, "bad invoice"},
		{"ErrorReleases", func(context.Context, *worker.Job) error { return errors.New("downstream 503") },
			false, worker.OutcomeReleased, ledger.StatusQueued, "downstream 503"},
		{"PanicReleases", func(context.Context, *worker.Job) error { panic("nil map") },
			false, worker.OutcomeReleased, ledger.StatusQueued, "panicked: nil map"},
		{"RetryAfterReleasesWithADelay", func(context.Context, *worker.Job) error { return worker.RetryAfter(time.Hour, errors.New("429")) },
			false, worker.OutcomeReleased, ledger.StatusQueued, "retry after 1h0m0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil, nil)
			b.mux.HandleFunc("job", c.handler)
			m := message("job", c.name, "{}")
			v := b.process(m)
			if v.Ack != c.wantAck || v.Outcome != c.wantOut {
				t.Fatalf("verdict = %+v, want ack %v, %s", v, c.wantAck, c.wantOut)
			}
			r := b.run(m.Identity.RunID)
			if r.Status != c.wantStatus || !strings.Contains(r.LastError, c.wantErr) {
				t.Fatalf("run = %s, error %q; want %s, error containing %q", r.Status, r.LastError, c.wantStatus, c.wantErr)
			}
			if c.name == "RetryAfterReleasesWithADelay" {
				if r.NotBefore.Before(time.Now().Add(59*time.Minute)) || !v.RetryAt.Equal(r.NotBefore) {
					t.Fatalf("NotBefore = %v, RetryAt %v; want an hour from now", r.NotBefore, v.RetryAt)
				}
				if again := b.process(m); again.Ack || again.Outcome != worker.OutcomeHeld {
					t.Fatalf("a delivery before Retry-After = %+v, want held and nacked", again)
				}
			}
		})
	}
}

func TestAttemptsExhaustedFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil) // MaxAttempts 3
	var calls atomic.Int32
	b.mux.HandleFunc("flaky", func(context.Context, *worker.Job) error { calls.Add(1); return errors.New("still broken") })
	m := message("flaky", "k", "{}")
	for i, want := range []string{worker.OutcomeReleased, worker.OutcomeReleased, worker.OutcomeFailed, worker.OutcomeTerminal} {
		if v := b.process(m); v.Outcome != want {
			t.Fatalf("delivery %d = %s, want %s", i+1, v.Outcome, want)
		}
	}
	r := b.run(m.Identity.RunID)
	if calls.Load() != 3 || r.Status != ledger.StatusFailed || !strings.Contains(r.LastError, "attempts exhausted") {
		t.Fatalf("%d calls, run %s %q; want 3 calls and failed with attempts exhausted", calls.Load(), r.Status, r.LastError)
	}
}

func TestPerJobMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	b.mux.HandleWith("once", worker.HandlerFunc(func(context.Context, *worker.Job) error { return errors.New("x") }), &worker.HandleOptions{MaxAttempts: 1})
	if v := b.process(message("once", "k", "{}")); v.Outcome != worker.OutcomeFailed {
		t.Fatalf("first failure of a job with max_attempts 1 = %s, want failed", v.Outcome)
	}
}

func TestHeldDeliveryIsNacked(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: 5 * time.Second})
	release := make(chan struct{})
	started := make(chan struct{})
	b.mux.HandleFunc("slow", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-release
		return nil
	})
	m := message("slow", "k", "{}")
	first := make(chan worker.Verdict)
	go func() { first <- b.process(m) }()
	<-started
	v := b.process(m)
	if v.Ack || v.Outcome != worker.OutcomeHeld || v.RetryAt.IsZero() {
		t.Fatalf("delivery while another attempt holds the run = %+v; want nacked as held, with when to retry", v)
	}
	close(release)
	if v := <-first; !v.Ack || v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("holder's verdict = %+v", v)
	}
	if v := b.process(m); !v.Ack || v.Outcome != worker.OutcomeTerminal {
		t.Fatalf("delivery of a completed run = %+v; want acked without work", v)
	}
}

func TestDuplicateDeliveriesRunTheHandlerOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: 5 * time.Second}).withQueue()
	var calls sync.Map
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		n, _ := calls.LoadOrStore(j.RunID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	b.pull(time.Second)
	const runs, dups = 20, 5
	var ids []string
	for i := range runs {
		m := message("job", fmt.Sprint(i), fmt.Sprintf(`{"i":%d}`, i))
		ids = append(ids, m.Identity.RunID)
		for range dups {
			if _, err := b.pub.Publish(t.Context(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		b.waitStatus(id, ledger.StatusCompleted, 10*time.Second)
	}
	// Late redeliveries of finished runs are acked without work.
	time.Sleep(200 * time.Millisecond)
	for _, id := range ids {
		n, ok := calls.Load(id)
		if !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("run %s: handler ran %v times for %d deliveries, want once", id[:8], n, dups)
		}
	}
}

// stallingLedger lets renewals fail or hang, to cut a worker off from its lease.
type stallingLedger struct {
	ledger.Driver
	renewErr atomic.Pointer[error]
}

func (s *stallingLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	if e := s.renewErr.Load(); e != nil {
		return nil, *e
	}
	return s.Driver.Renew(ctx, p)
}

func TestLeaseLostCancelsTheJobAndFencesItsWrites(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{Lease: 300 * time.Millisecond})
	took := make(chan struct{})
	var effectErr, cause error
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		// Another worker takes the run over (the ledger is told the lease has expired).
		run, _ := mem.Get(ctx, &ledger.GetParams{RunID: j.RunID})
		res, err := mem.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: j.RunID, PayloadHash: run.PayloadHash}, AttemptID: uuid.NewString(), Now: run.Deadline.Add(time.Millisecond)})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Errorf("takeover: %v, %v", res, err)
		}
		close(took)
		<-ctx.Done() // the next renewal finds the lease lost
		cause = context.Cause(ctx)
		effectErr = worker.Effect(ctx, "charge", func(context.Context, string) error {
			t.Error("an effect ran after the lease was lost")
			return nil
		})
		return nil // and even a success must not complete the run
	})
	m := message("job", "k", "{}")
	v := b.process(m)
	<-took
	if v.Ack || v.Outcome != worker.OutcomeLeaseLost {
		t.Fatalf("verdict = %+v, want nacked as lease lost", v)
	}
	if !errors.Is(cause, ledger.ErrLeaseLost) || effectErr == nil {
		t.Fatalf("job context cause = %v, effect error = %v; want ErrLeaseLost and a refused effect", cause, effectErr)
	}
	r := b.run(m.Identity.RunID)
	if r.Status != ledger.StatusRunning || r.Attempt != 2 {
		t.Fatalf("run = %s at attempt %d; want still held by attempt 2", r.Status, r.Attempt)
	}
	if _, err := mem.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: r.ID, Name: "charge"}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the fenced-out attempt recorded an effect: %v", err)
	}
}

func TestUnreachableLedgerSelfFencesBeforeTheLeaseRunsOut(t *testing.T) {
	t.Parallel()
	sl := &stallingLedger{Driver: memory.New(nil)}
	unavailable := fmt.Errorf("%w: connection refused", ledger.ErrUnavailable)
	sl.renewErr.Store(&unavailable)
	const lease = 600 * time.Millisecond
	b := setup(t, sl, &worker.Config{Lease: lease, FinishTimeout: 100 * time.Millisecond})
	var cancelledAt time.Time
	var deadline time.Time
	var cause error
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		r, _ := sl.Get(ctx, &ledger.GetParams{RunID: j.RunID})
		deadline = r.Deadline
		<-ctx.Done()
		cancelledAt, cause = time.Now(), context.Cause(ctx)
		return ctx.Err()
	})
	v := b.process(message("job", "k", "{}"))
	if !errors.Is(cause, worker.ErrSelfFenced) {
		t.Fatalf("job context cause = %v, want ErrSelfFenced", cause)
	}
	if !cancelledAt.Before(deadline) {
		t.Fatalf("job cancelled at %v, not before its lease ran out at %v", cancelledAt, deadline)
	}
	if v.Ack {
		t.Fatalf("verdict = %+v, want a nack", v)
	}
}

func TestEffects(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	var keys []string
	var charges, emails atomic.Int32
	b.mux.HandleFunc("invoice", func(ctx context.Context, j *worker.Job) error {
		if err := worker.Effect(ctx, "charge", func(ctx context.Context, key string) error {
			charges.Add(1)
			keys = append(keys, key)
			return nil
		}); err != nil {
			return err
		}
		return worker.Effect(ctx, "email", func(ctx context.Context, key string) error {
			if emails.Add(1) == 1 {
				return errors.New("smtp timeout") // the first attempt fails after charging
			}
			return nil
		})
	})
	m := message("invoice", "2026-11", "{}")
	if v := b.process(m); v.Outcome != worker.OutcomeReleased {
		t.Fatalf("first attempt = %s, want released", v.Outcome)
	}
	if v := b.process(m); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("second attempt = %s, want completed", v.Outcome)
	}
	if charges.Load() != 1 || emails.Load() != 2 {
		t.Fatalf("charged %d times, emailed %d times; want the charge once and the failed email retried", charges.Load(), emails.Load())
	}
	if keys[0] != ledger.EffectKey(m.Identity.RunID, "charge") {
		t.Fatalf("effect key %s, want EffectKey(run, charge)", keys[0])
	}
	if err := worker.Effect(t.Context(), "x", func(context.Context, string) error { return nil }); !errors.Is(err, worker.ErrNotInJob) {
		t.Fatalf("Effect outside a job = %v, want ErrNotInJob", err)
	}
}

func TestEffectInFlightAtACrashIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, nil)
	m := message("job", "k", "{}")
	// Attempt 1 began the effect and died (no release): its lease is left to expire.
	res, err := mem.Acquire(t.Context(), &ledger.AcquireParams{Identity: m.Identity, AttemptID: uuid.NewString(), Lease: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.BeginEffect(t.Context(), &ledger.BeginEffectParams{Fence: ledger.Fence{RunID: res.Run.ID, Attempt: 1, AttemptID: res.Run.AttemptID}, Name: "charge"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	var gotKey string
	var uncertain error
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		uncertain = worker.AtMostOnce(ctx, "charge", func(context.Context, string) error {
			t.Error("AtMostOnce redid an effect an earlier attempt began")
			return nil
		})
		return worker.Effect(ctx, "charge", func(ctx context.Context, key string) error { gotKey = key; return nil })
	})
	if v := b.process(m); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict = %s", v.Outcome)
	}
	var ue *worker.UncertainEffectError
	if !errors.Is(uncertain, worker.ErrEffectUncertain) || !errors.As(uncertain, &ue) || ue.Attempt != 1 {
		t.Fatalf("AtMostOnce of an effect a dead attempt began = %v; want ErrEffectUncertain naming attempt 1", uncertain)
	}
	if gotKey != ledger.EffectKey(m.Identity.RunID, "charge") {
		t.Fatalf("retried effect key %q, want the same key as attempt 1", gotKey)
	}
}

func TestHTTPTarget(t *testing.T) {
	t.Parallel()
	type call struct{ key, attempt, runID, job, sched string }
	var mu sync.Mutex
	var calls []call
	statuses := map[string][]int{"flaky": {500, 503, 200}, "bad": {400}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		job := r.Header.Get("X-Runonce-Job")
		calls = append(calls, call{r.Header.Get("Idempotency-Key"), r.Header.Get("X-Runonce-Attempt"), r.Header.Get("X-Runonce-Run-Id"), job, r.Header.Get("X-Runonce-Schedule-Time")})
		n := len(statuses[job])
		code := statuses[job][0]
		if n > 1 {
			statuses[job] = statuses[job][1:]
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	b := setup(t, nil, &worker.Config{Lease: time.Second, MaxAttempts: 5})
	worker.MuxFromJobs(b.mux, map[string]*jobs.Job{
		"flaky": {Name: "flaky", URL: u, Timeout: 5 * time.Second},
		"bad":   {Name: "bad", URL: u, Timeout: 5 * time.Second},
	}, nil)

	flaky := message("flaky", "sched-job", "{}")
	flaky.Identity.ScheduleTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	flaky.Identity.RunID = ledger.ScheduledRunID("ns", "flaky", "sched-job", flaky.Identity.ScheduleTime)
	for i, want := range []string{worker.OutcomeReleased, worker.OutcomeReleased, worker.OutcomeCompleted} {
		if v := b.process(flaky); v.Outcome != want {
			t.Fatalf("flaky delivery %d = %s, want %s", i+1, v.Outcome, want)
		}
	}
	bad := message("bad", "k", "{}")
	if v := b.process(bad); v.Outcome != worker.OutcomeFailed || !v.Ack {
		t.Fatalf("a 400 = %+v, want failed and acked", v)
	}
	if v := b.process(bad); v.Outcome != worker.OutcomeTerminal {
		t.Fatalf("a redelivery after a 400 = %s, want no retry", v.Outcome)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 4 {
		t.Fatalf("%d calls, want 3 for flaky and 1 for bad", len(calls))
	}
	wantKey := ledger.EffectKey(flaky.Identity.RunID, worker.RunEffect)
	for i, c := range calls[:3] {
		if c.key != wantKey || c.attempt != fmt.Sprint(i+1) || c.runID != flaky.Identity.RunID || c.sched != "2026-11-30T09:00:00Z" {
			t.Fatalf("call %d = %+v; want key %s, attempt %d, the run's ID and schedule time", i+1, c, wantKey[:8], i+1)
		}
	}
	if r := b.run(bad.Identity.RunID); r.Status != ledger.StatusFailed || !strings.Contains(r.LastError, "400") {
		t.Fatalf("bad run = %s %q", r.Status, r.LastError)
	}
}

func TestRescueRepublishesARunWhoseMessageWasNeverPublished(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, nil).withQueue()
	b2 := setup(t, mem, &worker.Config{Lease: time.Second, Republish: b.pub})
	done := make(chan string, 1)
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error { done <- string(j.Payload); return nil })
	b.pull(time.Second)
	m := message("job", "lost", `{"lost":true}`)
	// The ingress claimed the run and died before publishing.
	if _, err := mem.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString(), PickupTimeout: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	// Two rescuers race: exactly one republishes.
	var total atomic.Int32
	var wg sync.WaitGroup
	for _, w := range []*worker.Worker{b2.w, b2.w} {
		wg.Go(func() {
			n, err := w.RescueOnce(t.Context())
			if err != nil {
				t.Error(err)
			}
			total.Add(int32(n))
		})
	}
	wg.Wait()
	if total.Load() != 1 {
		t.Fatalf("rescuers republished %d times, want 1", total.Load())
	}
	select {
	case p := <-done:
		if p != `{"lost":true}` {
			t.Fatalf("republished payload %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the rescued run was never run")
	}
	b.waitStatus(m.Identity.RunID, ledger.StatusCompleted, 5*time.Second)
}

func TestShutdownReleasesAndNacksLongJobs(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{Lease: 2 * time.Second}).withQueue()
	started := make(chan struct{}, 1)
	b.mux.HandleFunc("long", func(ctx context.Context, j *worker.Job) error {
		started <- struct{}{}
		<-ctx.Done() // a job longer than the grace
		return context.Cause(ctx)
	})
	stop := b.pull(200 * time.Millisecond)
	m := message("long", "k", "{}")
	if _, err := b.pub.Publish(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	<-started
	begin := time.Now()
	stop()
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("shutdown took %v, want within the grace plus the finishing write", took)
	}
	r := b.run(m.Identity.RunID)
	if r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "shutting down") {
		t.Fatalf("after shutdown the run is %s (%q), want released with the shutdown as its error", r.Status, r.LastError)
	}
	// Another worker completes it from the nacked message.
	b2 := setup(t, mem, nil)
	b2.sub = queue.NewSubscriber(b.ps.Client, "runs-worker", nil)
	b2.mux.HandleFunc("long", func(context.Context, *worker.Job) error { return nil })
	b2.pull(time.Second)
	// Usually at once, from the nack; under load the client may drop a nack sent while
	// its streams stop, and the message comes back after its 10s ack deadline.
	b2.waitStatus(m.Identity.RunID, ledger.StatusCompleted, 30*time.Second)
}

func TestPushEndToEnd(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	op := &oidctest.Server{PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: "k1", Algorithm: "RS256"}}}
	idp := httptest.NewServer(op)
	t.Cleanup(idp.Close)
	op.SetIssuer(idp.URL)
	const aud, pusher = "https://worker.example/v1/push", "push@proj.iam.gserviceaccount.com"
	verifier, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Audience: aud, Allow: []string{pusher}, Issuers: []string{idp.URL}, JWKSURL: idp.URL + "/keys"})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, nil, nil)
	var ran atomic.Int32
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error { ran.Add(1); return nil })
	pushURL := b.pushServer(auth.Middleware(verifier))

	claims, _ := json.Marshal(map[string]any{"iss": idp.URL, "aud": aud, "sub": "1", "email": pusher, "email_verified": true,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
	token := oidctest.SignIDToken(key, "k1", "RS256", string(claims))
	m := message("job", "push", `{"p":1}`)
	env := map[string]any{"subscription": "projects/proj/subscriptions/push", "message": map[string]any{
		"attributes": m.Attributes(), "data": base64.StdEncoding.EncodeToString(m.Data()), "messageId": "1", "publishTime": time.Now().Format(time.RFC3339Nano)}}
	body, _ := json.Marshal(env)
	post := func(token string, body []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, pushURL, strings.NewReader(string(body)))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("", body); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("push without a token = %d, want 401", resp.StatusCode)
	}
	if resp := post(token, []byte(`{"not":"an envelope"`)); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("push of a broken envelope = %d, want 400", resp.StatusCode)
	}
	for i := range 2 {
		if resp := post(token, body); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("push %d = %d, want 204 (ack)", i+1, resp.StatusCode)
		}
	}
	if ran.Load() != 1 {
		t.Fatalf("the job ran %d times for two pushes, want once", ran.Load())
	}
}

func TestSweepDeletesExpiredRecords(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{Retention: time.Millisecond, UnsafeRetention: true})
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		return worker.Effect(ctx, "e", func(context.Context, string) error { return nil })
	})
	m := message("job", "k", "{}")
	m.EnqueuedAt = time.Time{} // no age: a 1ms retention would drop it
	if v := b.w.Process(t.Context(), &queue.Delivery{Message: m}); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict %s", v.Outcome)
	}
	time.Sleep(5 * time.Millisecond)
	n, err := b.w.SweepOnce(t.Context(), 100)
	if err != nil || n != 2 {
		t.Fatalf("SweepOnce = %d, %v; want the run and its effect deleted", n, err)
	}
	if _, err := mem.Get(t.Context(), &ledger.GetParams{RunID: m.Identity.RunID}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get after the sweep: %v", err)
	}
}

func TestMessageOlderThanTheRetentionIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Retention: 24 * time.Hour, UnsafeRetention: true})
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error {
		t.Error("a message older than the retention, whose run has no record, was run")
		return nil
	})
	m := message("job", "old", "{}")
	m.EnqueuedAt = time.Now().Add(-25 * time.Hour) // its run may have been deleted: running it could run it twice
	v := b.w.Process(t.Context(), &queue.Delivery{Message: m, PublishTime: time.Now().Add(-25 * time.Hour)})
	if !v.Ack || v.Outcome != worker.OutcomeDropped {
		t.Fatalf("verdict = %+v, want acked and dropped", v)
	}
	if _, err := b.ledger.Get(t.Context(), &ledger.GetParams{RunID: m.Identity.RunID}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the dropped message created its run: %v", err)
	}
}

// A message the rescuer republishes carries the run's creation time, which may be older
// than the retention: it must run the run that exists. Before, the worker dropped it
// (acked, as too old) and the rescuer republished it every pickup timeout, forever.
func TestOldMessageOfAnExistingRunRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Retention: 24 * time.Hour, UnsafeRetention: true, PickupTimeout: time.Millisecond})
	var runs atomic.Int32
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error { runs.Add(1); return nil })
	m := message("job", "rescued", "{}")
	if _, err := b.ledger.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: "ingress", PickupTimeout: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	m.EnqueuedAt = time.Now().Add(-30 * 24 * time.Hour) // a run rescued for weeks
	if v := b.w.Process(t.Context(), &queue.Delivery{Message: m, PublishTime: time.Now()}); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict = %+v, want the existing run completed", v)
	}
	if runs.Load() != 1 {
		t.Fatalf("the job ran %d times, want once", runs.Load())
	}
}

// A delivery whose data is not the payload the run was accepted with (a forged or stale
// message for an existing run ID) must never run: acked, the run untouched.
func TestDeliveryWithAnotherPayloadNeverRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error {
		t.Error("a delivery with another payload ran")
		return nil
	})
	accepted := message("job", "invoice-7", `{"amount":10}`)
	if _, err := b.ledger.Claim(t.Context(), &ledger.ClaimParams{Identity: accepted.Identity, AttemptID: "ingress"}); err != nil {
		t.Fatal(err)
	}
	forged := message("job", "invoice-7", `{"amount":10000}`)
	forged.Identity.PayloadHash = accepted.Identity.PayloadHash // the attribute lies; the data does not
	v := b.process(forged)
	if !v.Ack || v.Outcome != worker.OutcomePayloadMismatch {
		t.Fatalf("verdict = %+v, want acked as payload_mismatch", v)
	}
	if r := b.run(accepted.Identity.RunID); r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("run after the forged delivery = %s attempt %d, want queued and untouched", r.Status, r.Attempt)
	}
}

func TestHTTPTargetWithOIDCSendsAnIDTokenForTheURL(t *testing.T) {
	t.Parallel()
	var gotAuth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/run")
	var audience string
	tokens := func(_ context.Context, aud string) (string, error) { audience = aud; return "id-token-for-" + aud, nil }
	b := setup(t, nil, nil)
	worker.MuxFromJobs(b.mux, map[string]*jobs.Job{"secure": {Name: "secure", URL: u, Auth: jobs.AuthOIDC}}, &worker.HTTPTargetOptions{Token: tokens})
	if v := b.process(message("secure", "k", "{}")); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict %s", v.Outcome)
	}
	if audience != u.String() || gotAuth.Load() != "Bearer id-token-for-"+u.String() {
		t.Fatalf("audience %q, Authorization %q; want an ID token for the job's URL", audience, gotAuth.Load())
	}

	// Without a token source the job cannot authenticate: it fails for good, loudly.
	b2 := setup(t, nil, nil)
	worker.MuxFromJobs(b2.mux, map[string]*jobs.Job{"secure": {Name: "secure", URL: u, Auth: jobs.AuthOIDC}}, nil)
	m := message("secure", "k2", "{}")
	if v := b2.process(m); v.Outcome != worker.OutcomeFailed {
		t.Fatalf("oidc without a token source = %s, want failed", v.Outcome)
	}
	if r := b2.run(m.Identity.RunID); !strings.Contains(r.LastError, "no ID token source") {
		t.Fatalf("last error %q", r.LastError)
	}
}

// A 409 with Retry-After (the Idempotency-Key draft's "still in flight", as
// pkg/receiver answers while an earlier attempt's call runs downstream) releases the run
// until then; a 409 without one (a conflict, or pkg/receiver's refusal of a superseded
// attempt) fails it, as any other 4xx does.
func TestHTTPTargetConflictWithRetryAfterIsRetried(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		retryAfter string
		want       string
	}{{"7", worker.OutcomeReleased}, {"", worker.OutcomeFailed}} {
		t.Run("RetryAfter="+c.retryAfter, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(http.StatusConflict)
			}))
			t.Cleanup(srv.Close)
			u, _ := url.Parse(srv.URL)
			b := setup(t, nil, &worker.Config{Lease: time.Second, MaxAttempts: 5})
			worker.MuxFromJobs(b.mux, map[string]*jobs.Job{"held": {Name: "held", URL: u, Timeout: 5 * time.Second}}, nil)
			m := message("held", "k", "{}")
			if v := b.process(m); v.Outcome != c.want {
				t.Fatalf("a 409 with Retry-After %q = %+v, want %s", c.retryAfter, v, c.want)
			}
			if c.want != worker.OutcomeReleased {
				return
			}
			if d := time.Until(b.run(m.Identity.RunID).NotBefore); d < 5*time.Second || d > 7*time.Second {
				t.Fatalf("NotBefore is %v from now, want the 7s of Retry-After", d)
			}
		})
	}
}

// A Retry-After beyond what a time.Duration holds, or longer than the retention, is cut
// to MaxRetryAfter: before, seconds over ~292 years overflowed, and a delay past the
// retention set not_before after expire_at, so the sweeper deleted the run before its
// retry.
func TestRetryAfterIsBoundedInsideTheRetention(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"99999999999999999", "31536000"} { // overflow; a year
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", header)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(srv.Close)
			u, _ := url.Parse(srv.URL)
			retention := 48 * time.Hour
			b := setup(t, nil, &worker.Config{Lease: time.Second, MaxAttempts: 5, Retention: retention, UnsafeRetention: true, MaxRetryAfter: 6 * time.Hour})
			worker.MuxFromJobs(b.mux, map[string]*jobs.Job{"busy": {Name: "busy", URL: u, Timeout: 5 * time.Second}}, nil)
			m := message("busy", "k", "{}")
			if v := b.process(m); v.Outcome != worker.OutcomeReleased {
				t.Fatalf("a 429 = %+v, want released", v)
			}
			r := b.run(m.Identity.RunID)
			if d := time.Until(r.NotBefore); d < 5*time.Hour || d > 6*time.Hour {
				t.Fatalf("NotBefore is %v from now, want the 6h MaxRetryAfter", d)
			}
			if r.ExpireAt.Before(r.NotBefore.Add(retention)) {
				t.Fatalf("ExpireAt %v is before NotBefore %v + the retention", r.ExpireAt, r.NotBefore)
			}
		})
	}
	if _, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: worker.NewMux(), Retention: time.Hour, UnsafeRetention: true, MaxRetryAfter: 2 * time.Hour}); err == nil {
		t.Fatal("worker.New accepted a MaxRetryAfter longer than the retention")
	}
}

// Push deliveries are bounded like pull deliveries: past Concurrency running at once,
// a push is answered 429 (Pub/Sub redelivers it) instead of starting another job.
func TestPushDeliveriesAreBoundedByTheConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: time.Second, MaxAttempts: 3, Concurrency: 1})
	started, release := make(chan struct{}), make(chan struct{})
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error {
		started <- struct{}{}
		<-release
		return nil
	})
	pushURL := b.pushServer(worker.NoAuth)
	post := func(key string) int {
		m := message("job", key, "{}")
		env, _ := json.Marshal(map[string]any{"subscription": "projects/p/subscriptions/s", "message": map[string]any{
			"attributes": m.Attributes(), "data": base64.StdEncoding.EncodeToString(m.Data()), "messageId": key, "publishTime": time.Now().Format(time.RFC3339Nano)}})
		resp, err := http.Post(pushURL, "application/json", strings.NewReader(string(env)))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post("a") }()
	<-started
	if got := post("b"); got != http.StatusTooManyRequests {
		t.Fatalf("a second push while one runs = %d, want 429", got)
	}
	close(release)
	if got := <-first; got != http.StatusNoContent {
		t.Fatalf("the first push = %d, want 204", got)
	}
	go func() { <-started }()
	if got := post("b"); got != http.StatusNoContent {
		t.Fatalf("a push once the slot is free = %d, want 204", got)
	}
}

// A push runs any job with any payload, and a web page can post a text/plain "form" to
// any URL without a preflight: the push endpoint refuses a post a browser sends from a
// page of another origin, whatever PushAuth lets through, while Pub/Sub's (no Origin)
// and a same-origin page's still run.
func TestPushRefusesAPostFromAnotherSite(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: time.Second, MaxAttempts: 3})
	var ran atomic.Int64
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error { ran.Add(1); return nil })
	pushURL := b.pushServer(worker.NoAuth)
	post := func(key string, hdr map[string]string) (int, string) {
		m := message("job", key, "{}")
		env, _ := json.Marshal(map[string]any{"subscription": "projects/p/subscriptions/s", "message": map[string]any{
			"attributes": m.Attributes(), "data": base64.StdEncoding.EncodeToString(m.Data()), "messageId": key, "publishTime": time.Now().Format(time.RFC3339Nano)}})
		req, _ := http.NewRequest(http.MethodPost, pushURL, strings.NewReader(string(env)))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	for _, hdr := range []map[string]string{
		{"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Content-Type": "text/plain", "Origin": "https://evil.example"},
	} {
		if got, msg := post("from-a-page", hdr); got != http.StatusForbidden || !strings.Contains(msg, "cross-origin request refused") || !strings.Contains(msg, "https://evil.example") {
			t.Errorf("a cross-site push (%v) = %d %q; want 403 naming the cross-origin request", hdr, got, msg)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("cross-site pushes ran the job %d times", n)
	}
	if _, err := b.ledger.Get(t.Context(), &ledger.GetParams{RunID: ledger.KeyedRunID("ns", "job", "from-a-page")}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a cross-site push left a run record: %v", err)
	}
	if got, msg := post("from-pubsub", map[string]string{"Content-Type": "application/json"}); got != http.StatusNoContent {
		t.Fatalf("Pub/Sub's push = %d %q, want 204", got, msg)
	}
	if got, msg := post("same-origin", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}); got != http.StatusNoContent {
		t.Fatalf("a same-origin push = %d %q, want 204", got, msg)
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("the job ran %d times, want 2", n)
	}
}

// A handler past its maximum run time is cancelled and its run released: before, a
// hung handler renewed its lease forever.
func TestHandlerPastItsMaxRunTimeIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: 300 * time.Millisecond, MaxAttempts: 3, MaxRunTime: time.Hour})
	var cause error
	b.mux.HandleWith("hang", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}), &worker.HandleOptions{MaxRunTime: 500 * time.Millisecond})
	m := message("hang", "k", "{}")
	start := time.Now()
	v := b.process(m)
	if v.Outcome != worker.OutcomeReleased || v.Ack {
		t.Fatalf("verdict = %+v, want released and nacked", v)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the hung job ran %v, want about its 500ms max run time", d)
	}
	if !errors.Is(cause, worker.ErrMaxRunTime) {
		t.Fatalf("job context cause = %v, want ErrMaxRunTime", cause)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "maximum run time") {
		t.Fatalf("run = %s %q, want queued with the max run time as its error", r.Status, r.LastError)
	}
}

// blackholeLedger never answers Acquire until its context ends, as a blackholed
// connection does.
type blackholeLedger struct{ ledger.Driver }

func (blackholeLedger) Acquire(ctx context.Context, _ *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Every ledger call of the worker is bounded: a blackholed ledger gives the delivery
// back (nacked) after LedgerTimeout, instead of holding its slot while Pub/Sub keeps
// extending the ack deadline.
func TestBlackholedLedgerCallIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, blackholeLedger{memory.New(nil)}, &worker.Config{LedgerTimeout: 200 * time.Millisecond})
	b.mux.HandleFunc("job", func(context.Context, *worker.Job) error { return nil })
	done := make(chan worker.Verdict, 1)
	go func() { done <- b.process(message("job", "k", "{}")) }()
	select {
	case v := <-done:
		if v.Ack || v.Outcome != worker.OutcomeError {
			t.Fatalf("verdict = %+v, want nacked as a ledger error", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a delivery against a blackholed ledger was still held after 10s (LedgerTimeout 200ms)")
	}
}
