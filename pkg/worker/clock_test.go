package worker_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/worker"
)

// fakeClock is a clock a test moves: its timers fire, in the order of their deadlines,
// as advance passes them, on the goroutine that advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	at  time.Time
	seq int
	f   func()
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, u := range c.timers {
			if u == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// advance moves the clock by d and fires every timer due, those the fired ones arm too.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		if len(c.timers) == 0 || c.timers[0].at.After(c.now) {
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		c.mu.Unlock()
		t.f()
	}
}

// A hung handler is stopped at its MaxRunTime as judged by Config.Now, not by the
// machine's clock: a worker on a clock it does not own (a simulation's) releases the
// run once that clock passes the MaxRunTime, though almost no real time went by.
func TestMaxRunTimeIsJudgedByConfigNow(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Now()}
	b := setup(t, nil, &worker.Config{Lease: 30 * time.Second, MaxAttempts: 3, Now: clk.Now, AfterFunc: clk.AfterFunc})
	started := make(chan struct{})
	var cause error
	b.mux.HandleWith("hang", worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) error {
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}), &worker.HandleOptions{MaxRunTime: time.Hour})
	m := message("hang", "k", "{}")
	done := make(chan worker.Verdict, 1)
	go func() { done <- b.process(m) }()
	<-started
	clk.advance(59 * time.Minute)
	select {
	case v := <-done:
		t.Fatalf("the job ended before its max run time by the worker's clock: %+v (cause %v)", v, cause)
	case <-time.After(50 * time.Millisecond):
	}
	clk.advance(2 * time.Minute)
	var v worker.Verdict
	select {
	case v = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the hung job is still running 61 minutes past its start by the worker's clock; its max run time is an hour")
	}
	if v.Outcome != worker.OutcomeReleased || v.Ack {
		t.Fatalf("verdict = %+v, want released and nacked", v)
	}
	if !errors.Is(cause, worker.ErrMaxRunTime) {
		t.Fatalf("job context cause = %v, want ErrMaxRunTime (the renewals on the fake clock kept the lease)", cause)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "maximum run time") {
		t.Fatalf("run = %s %q, want queued with the max run time as its error", r.Status, r.LastError)
	}
}

// failingRenewals refuses every renewal as unavailable.
type failingRenewals struct{ ledger.Driver }

func (failingRenewals) Renew(context.Context, *ledger.RenewParams) (*ledger.Run, error) {
	return nil, ledger.ErrUnavailable
}

// The lease keeper self-fences by Config.Now: once that clock passes the point where
// the lease could run out, with every renewal failed, the job is stopped.
func TestKeeperSelfFencesByConfigNow(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Now()}
	b := setup(t, failingRenewals{memory.New(nil)}, &worker.Config{Lease: 30 * time.Second, MaxAttempts: 3, Now: clk.Now, AfterFunc: clk.AfterFunc})
	started := make(chan struct{})
	var cause error
	b.mux.HandleFunc("hang", func(ctx context.Context, _ *worker.Job) error {
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	done := make(chan worker.Verdict, 1)
	go func() { done <- b.process(message("hang", "k", "{}")) }()
	<-started
	for range 6 { // renewals every 10s fail; the self-fence is 25s after the claim
		clk.advance(5 * time.Second)
	}
	select {
	case v := <-done:
		if v.Ack {
			t.Fatalf("verdict = %+v, want nacked", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not self-fence 30s after the claim by the worker's clock, with every renewal failed")
	}
	if !errors.Is(cause, worker.ErrSelfFenced) || !errors.Is(cause, ledger.ErrUnavailable) {
		t.Fatalf("job context cause = %v, want ErrSelfFenced with the renewals' error", cause)
	}
}

// A worker whose clock is behind the machine's (here a day) keeps its lease and
// finishes its job: the keeper used to wait for its self-fence point, computed on
// Config.Now, on the machine's clock, and fenced itself at once.
func TestClockBehindTheMachineKeepsTheLease(t *testing.T) {
	t.Parallel()
	behind := func() time.Time { return time.Now().Add(-24 * time.Hour) }
	b := setup(t, nil, &worker.Config{Lease: 300 * time.Millisecond, MaxAttempts: 3, Now: behind})
	var cause error
	b.mux.HandleFunc("slow", func(ctx context.Context, _ *worker.Job) error {
		select {
		case <-time.After(time.Second): // three leases, renewed
			return nil
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		}
	})
	if v := b.process(message("slow", "k", "{}")); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict = %+v (job context cause %v), want completed", v, cause)
	}
}

// contendedRenewals answers the first n renewals as contended, then renews.
type contendedRenewals struct {
	ledger.Driver
	mu sync.Mutex
	n  int
}

func (l *contendedRenewals) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	l.mu.Lock()
	refuse := l.n > 0
	l.n--
	l.mu.Unlock()
	if refuse {
		return nil, ledger.ErrContended
	}
	return l.Driver.Renew(ctx, p)
}

// A renewal that fails (here contended, as a Firestore renewal can be by the holder's
// own effect writes) is tried again soon: two failures in a row leave the lease held.
// The keeper used to wait a third of the lease before each try, and two failures used
// up the lease: it self-fenced a holder whose renewals were merely contended, and the
// next attempt redid its effects.
func TestKeeperRetriesAFailedRenewalSoon(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Now()}
	b := setup(t, &contendedRenewals{Driver: memory.New(nil), n: 2}, &worker.Config{Lease: 30 * time.Second, MaxAttempts: 3, Now: clk.Now, AfterFunc: clk.AfterFunc})
	started, finish := make(chan struct{}), make(chan struct{})
	var cause error
	b.mux.HandleFunc("long", func(ctx context.Context, _ *worker.Job) error {
		close(started)
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		}
	})
	done := make(chan worker.Verdict, 1)
	go func() { done <- b.process(message("long", "k", "{}")) }()
	<-started
	// Renewals at 10 s (contended), 11 s (contended), 13 s; the self-fence would be at
	// 25 s, and 40 s are a lease past the last failure.
	for range 80 {
		clk.advance(500 * time.Millisecond)
	}
	close(finish)
	var v worker.Verdict
	select {
	case v = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not finish")
	}
	if v.Outcome != worker.OutcomeCompleted || cause != nil {
		t.Fatalf("verdict = %+v (job context cause %v); want completed, the lease kept through two contended renewals", v, cause)
	}
}

// deadlines records the deadline of each worker claim.
type deadlines struct {
	ledger.Driver
	mu     sync.Mutex
	claims []time.Duration // how far each claim's deadline was when it was made
}

func (l *deadlines) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	if d, ok := ctx.Deadline(); ok {
		l.mu.Lock()
		l.claims = append(l.claims, time.Until(d))
		l.mu.Unlock()
	}
	return l.Driver.Acquire(ctx, p)
}

// A worker claim may take only until the lease keeper's self-fence point (five sixths
// of the lease): an answer after it could not start the job (the run would wait a
// lease for its next attempt), so the ledger must not go on retrying past it, as it did
// until the LedgerTimeout (10 s, on a 6 s lease).
func TestClaimIsBoundedByItsLease(t *testing.T) {
	t.Parallel()
	l := &deadlines{Driver: memory.New(nil)}
	b := setup(t, l, &worker.Config{Lease: 6 * time.Second, MaxAttempts: 3})
	b.mux.HandleFunc("quick", func(context.Context, *worker.Job) error { return nil })
	if v := b.process(message("quick", "k", "{}")); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("verdict = %+v, want completed", v)
	}
	if len(l.claims) != 1 || l.claims[0] > 5*time.Second {
		t.Fatalf("the worker claim had %v left before its deadline; want at most 5s (a 6s lease's self-fence point)", l.claims)
	}
}
