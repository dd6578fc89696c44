package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

// readCounter counts the ledger's reads (Get) and lets a test act between a read and
// the next claim.
type readCounter struct {
	ledger.Driver
	gets          atomic.Int64
	beforeAcquire func()
}

func (r *readCounter) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	r.gets.Add(1)
	return r.Driver.Get(ctx, p)
}

func (r *readCounter) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	if f := r.beforeAcquire; f != nil {
		r.beforeAcquire = nil
		f()
	}
	return r.Driver.Acquire(ctx, p)
}

// A 2xx promises a run that ends completed or failed. A run of a job no worker has a
// handler for used to stay queued for ever, each delivery nacked: now, once it has
// waited UnhandledAfter for a worker that runs the job, the worker that receives it
// claims it and fails it, naming the job. Before that, the delivery is nacked as
// before, without even a ledger read while the run is younger than the bound.
func TestRunOfAJobNoWorkerRunsFailsAfterTheBound(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	mem := &readCounter{Driver: memory.New(&memory.Options{Clock: clk.Now})}
	b := setup(t, mem, &worker.Config{MaxAttempts: 3, NoHandlerDelay: time.Millisecond, UnhandledAfter: time.Hour, Now: clk.Now, Instance: "worker-b/1"})
	b.mux.HandleFunc("known", func(context.Context, *worker.Job) error { return nil })
	m := message("reprot", "k", "{}")
	m.EnqueuedAt = clk.Now()
	if _, err := mem.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}

	clk.advance(59 * time.Minute)
	if v := b.process(m); v.Ack || v.Outcome != worker.OutcomeNoHandler {
		t.Fatalf("a delivery before the bound = %+v, want nacked as no_handler", v)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("before the bound the run is %s at attempt %d; want queued, untouched", r.Status, r.Attempt)
	}
	if n := mem.gets.Load() - 1; n != 0 { // b.run read it once
		t.Fatalf("a delivery of a run younger than the bound read the ledger %d times, want 0", n)
	}

	clk.advance(2 * time.Minute)
	v := b.process(m)
	if !v.Ack || v.Outcome != worker.OutcomeUnhandled {
		t.Fatalf("a delivery past the bound = %+v, want acked as unhandled", v)
	}
	r := b.run(m.Identity.RunID)
	for _, want := range []string{`no worker has a handler for job "reprot"`, "waited 1h1m0s", "-unhandled-after", "worker-b/1"} {
		if r.Status != ledger.StatusFailed || !strings.Contains(r.LastError, want) {
			t.Fatalf("past the bound the run is %s with error %q; want failed, the error saying %q", r.Status, r.LastError, want)
		}
	}
	if v := b.process(m); !v.Ack || v.Outcome != worker.OutcomeTerminal {
		t.Fatalf("a later delivery of the failed run = %+v, want acked as a duplicate", v)
	}
}

// The bound counts from the last time a worker took the run, not from its creation: an
// old run that a worker with the handler released for a retry (and so a run a worker
// still runs) is not failed by a worker without it, and an operator's retry gives a
// failed one another full wait.
func TestUnhandledCountsFromTheLastClaim(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	mem := memory.New(&memory.Options{Clock: clk.Now})
	b := setup(t, mem, &worker.Config{MaxAttempts: 5, NoHandlerDelay: time.Millisecond, UnhandledAfter: time.Hour, Now: clk.Now})
	m := message("elsewhere", "k", "{}")
	m.EnqueuedAt = clk.Now()
	if _, err := mem.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	// A worker that runs the job takes it three hours later and releases it.
	clk.advance(3 * time.Hour)
	res, err := mem.Acquire(t.Context(), &ledger.AcquireParams{Identity: m.Identity, AttemptID: uuid.NewString(), Worker: "worker-a/1"})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	fence := ledger.Fence{RunID: m.Identity.RunID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
	if _, err := mem.Release(t.Context(), &ledger.ReleaseParams{Fence: fence, Error: "downstream busy"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(30 * time.Minute)
	if v := b.process(m); v.Ack || v.Outcome != worker.OutcomeNoHandler {
		t.Fatalf("a delivery 30m after a worker released the 3h-old run = %+v, want nacked as no_handler", v)
	}
	// Rescues republish the run; they are not a worker taking it.
	for range 3 {
		clk.advance(10 * time.Minute)
		cur := b.run(m.Identity.RunID)
		if _, err := mem.Rescue(t.Context(), &ledger.RescueParams{RunID: cur.ID, Status: cur.Status, Attempt: cur.Attempt, Deadline: cur.Deadline}); err != nil {
			t.Fatal(err)
		}
	}
	if v := b.process(m); !v.Ack || v.Outcome != worker.OutcomeUnhandled {
		t.Fatalf("a delivery 1h after the release, with rescues since = %+v, want acked as unhandled", v)
	}
	// An operator retries it: it waits a full bound again.
	if _, err := mem.Retry(t.Context(), &ledger.OperatorParams{RunID: m.Identity.RunID, Actor: "oncall@example.com", Reason: "deploying the handler"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(59 * time.Minute)
	if v := b.process(m); v.Ack || v.Outcome != worker.OutcomeNoHandler {
		t.Fatalf("a delivery 59m after an operator's retry = %+v, want nacked as no_handler", v)
	}
	clk.advance(2 * time.Minute)
	if v := b.process(m); v.Outcome != worker.OutcomeUnhandled {
		t.Fatalf("a delivery 1h1m after an operator's retry = %+v, want unhandled", v)
	}
}

// A negative UnhandledAfter keeps the old behaviour: the run waits for ever; and a run
// that another attempt claimed between the read and the claim is released, not failed.
func TestUnhandledNeverAndTheClaimRace(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	mem := &readCounter{Driver: memory.New(&memory.Options{Clock: clk.Now})}
	b := setup(t, mem, &worker.Config{MaxAttempts: 5, NoHandlerDelay: time.Millisecond, UnhandledAfter: -1, Now: clk.Now})
	m := message("elsewhere", "k", "{}")
	m.EnqueuedAt = clk.Now()
	if _, err := mem.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	clk.advance(30 * 24 * time.Hour)
	if v := b.process(m); v.Outcome != worker.OutcomeNoHandler {
		t.Fatalf("UnhandledAfter -1, a delivery of a 30-day-old run = %+v, want nacked as no_handler", v)
	}

	b.rebuild(func(c *worker.Config) { c.UnhandledAfter = time.Hour })
	mem.beforeAcquire = func() {
		// Between the worker's read and its claim, a worker that runs the job takes the
		// run and releases it.
		res, err := mem.Driver.Acquire(t.Context(), &ledger.AcquireParams{Identity: m.Identity, AttemptID: uuid.NewString(), Worker: "worker-a/1"})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Errorf("Acquire: %v %v", res, err)
			return
		}
		if _, err := mem.Driver.Release(t.Context(), &ledger.ReleaseParams{Fence: ledger.Fence{RunID: res.Run.ID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}, Error: "busy"}); err != nil {
			t.Error(err)
		}
	}
	v := b.process(m)
	r := b.run(m.Identity.RunID)
	if v.Ack || v.Outcome != worker.OutcomeReleased || r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "claimed it since it was read") {
		t.Fatalf("a run claimed by another attempt between the read and the claim = %+v, run %s %q; want released, not failed", v, r.Status, r.LastError)
	}
}

// Through Run and a real Pub/Sub: a run of a job no worker runs, redelivered after
// each nack, ends failed once the bound passes, and its message is acked.
func TestPulledRunOfAJobNoWorkerRunsEndsFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{MaxAttempts: 3, Lease: time.Second, NoHandlerDelay: 20 * time.Millisecond, UnhandledAfter: 700 * time.Millisecond}).withQueue()
	b.mux.HandleFunc("known", func(context.Context, *worker.Job) error { return nil })
	m := message("nobody-runs-this", "k", "{}")
	if _, err := b.ledger.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.Publish(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	b.pull(time.Second)
	time.Sleep(300 * time.Millisecond)
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("before the bound the run is %s at attempt %d; want queued, untouched", r.Status, r.Attempt)
	}
	r := b.waitStatus(m.Identity.RunID, ledger.StatusFailed, 10*time.Second)
	if !strings.Contains(r.LastError, `no worker has a handler for job "nobody-runs-this"`) || r.Attempt != 1 {
		t.Fatalf("the run failed at attempt %d with %q; want attempt 1, naming the job", r.Attempt, r.LastError)
	}
	waitAcked(t, b.ps, m.Identity.RunID, 5*time.Second)
}

// waitAcked waits until the in-process Pub/Sub has no unacked message of the run.
func waitAcked(t *testing.T, ps *pubsubtest.InProcess, runID string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		pending := 0
		for _, msg := range ps.Server.Messages() {
			if msg.Attributes["run_id"] == runID && msg.Acks == 0 {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages of run %s still unacked after %s", pending, runID, within)
		}
	}
}
