package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// clock is the simulation's time: it moves only when the driver moves it. It is the
// workers' worker.Config.AfterFunc too: its timers (a job's MaxRunTime, the lease
// keeper's renewals and self-fence) fire as the driver moves it past them, in the order
// of their deadlines, on the driver's goroutine, with the clock at each deadline in
// turn; so they follow the schedule.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*timer
	// inTimer is set while a timer's function runs.
	inTimer bool
}

type timer struct {
	at  time.Time
	seq int
	f   func()
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f once the clock has moved d on.
func (c *clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, t)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		return true
	}
}

// firing reports whether a timer's function is running (the caller is a worker's lease
// keeper or its MaxRunTime, not an actor).
func (c *clock) firing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inTimer
}

// advance moves the clock by d, firing every timer due on the way at its deadline.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.fire(target)
	c.mu.Lock()
	c.now = target
	c.mu.Unlock()
}

// fire calls, in the order of their deadlines, the timers due by until (those the
// fired ones arm too), each with the clock at its deadline.
func (c *clock) fire(until time.Time) {
	for {
		c.mu.Lock()
		var next *timer
		for _, t := range c.timers {
			if !t.at.After(until) && (next == nil || t.at.Before(next.at) || t.at.Equal(next.at) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			c.mu.Unlock()
			return
		}
		c.timers = slices.Delete(c.timers, slices.Index(c.timers, next), slices.Index(c.timers, next)+1)
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.inTimer = true
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
		c.inTimer = false
		c.mu.Unlock()
	}
}

// fault is what the wrappers do to one call.
type fault int

const (
	faultNone fault = iota
	// faultBefore fails the call before it applies.
	faultBefore
	// faultAfter applies the call, lets others run, then reports an error or a timeout:
	// the write landed and the caller does not know.
	faultAfter
	// faultSlow applies the call and lets others run before it answers.
	faultSlow
	// faultHang blackholes the call (it may have applied): it answers only when the
	// caller's deadline passes, and never when the caller set none.
	faultHang
)

// faults draws a fault for each call from the schedule's random source. Every draw is
// made by the actor holding the baton, so the draws follow the schedule.
type faults struct {
	rng *rand.Rand
	// rate is the chance of each of the three faults, per call; zero turns them off.
	rate float64
	// log records each fault in the schedule's trace.
	log func(format string, args ...any)
	// noGhostClaims turns a worker claim's faults that apply it unbeknown to its worker
	// (it applies, then fails or hangs) into a refusal before it applies: on a clockless
	// ledger such a claim's lease would never run out (clocklessLease).
	noGhostClaims bool
}

func (f *faults) draw(ctx context.Context, what string) fault {
	return f.drawAt(ctx, what, f.rate)
}

// drawAt draws a fault for a call at rate instead of the schedule's (zero: none).
func (f *faults) drawAt(ctx context.Context, what string, rate float64) fault {
	if rate == 0 {
		return faultNone
	}
	x := f.rng.Float64()
	var d fault
	switch {
	case x < rate:
		d = faultBefore
	case x < 2*rate:
		d = faultAfter
	case x < 3*rate:
		d = faultSlow
	case x < 3*rate+rate/4:
		d = faultHang
	default:
		return faultNone
	}
	if f.noGhostClaims && what == "acquire" && (d == faultAfter || d == faultHang) {
		d = faultBefore
	}
	if f.log != nil {
		id := 0
		if a := actorFrom(ctx); a != nil {
			id = a.id
		}
		f.log("fault: actor %d: %s %s", id, what, [...]string{"", "fails before it applies", "applies, then reports an error", "applies, answers late", "hangs"}[d])
	}
	return d
}

// afterError is the error a call that applied reports: unavailable or a timeout.
func (f *faults) afterError(what string) error {
	if f.rng.IntN(2) == 0 {
		return fmt.Errorf("%w: sim: %s applied, then the connection broke", ledger.ErrUnavailable, what)
	}
	return fmt.Errorf("%w: sim: %s applied, then the call timed out: %w", ledger.ErrUnavailable, what, context.DeadlineExceeded)
}

// faultLedger wraps the ledger under test: every call is a scheduling point, may fail,
// and runs at the simulation's clock.
type faultLedger struct {
	ledger.Driver
	s     *sched
	f     *faults
	clock *clock
	// acquired notes every lease a worker claim or a renewal granted, for the checks.
	acquired func(r *ledger.Run)
	// sweeping runs as a sweep applies, before it deletes anything.
	sweeping func(ctx context.Context)
	// accepted notes every fenced write the ledger accepted (renew, complete, release,
	// fail, begin effect, complete effect) with the run as it stood just before the
	// write applied: its linearisation point, since only one actor runs at a time.
	accepted func(op string, f ledger.Fence, before *ledger.Run)
	// effectDone notes every effect completion the ledger accepted, as it applied.
	effectDone func(runID, name string)
	// operated notes every operator's action the ledger accepted (retry, cancel,
	// operator release, resolve), with the run just before it.
	operated func(op string, before *ledger.Run)
	// resolved notes every resolution of an effect the ledger accepted, as it applied.
	resolved func(runID, effect string, done bool)
	// hung handles a call that hangs with no deadline (see hang).
	hung func(ctx context.Context, what string) error
	// unbounded drops the callers' deadlines (the mutant unbounded-calls).
	unbounded bool
	// clockless is set for a ledger that judges time by its own clock (Firestore): no
	// call carries a Now, and a rescue listing waits until every pickup deadline written
	// before it (a millisecond long there) has passed on that clock.
	clockless bool
}

// hang is a call blackholed at random: where the caller bounded it, its deadline
// passes (time moves on meanwhile) and it fails with a timeout; where not, the caller
// would wait forever, which breaks the promise that every wait is bounded (worker's
// Config.LedgerTimeout, the ingress's timeouts): it is reported and the actor hangs
// until the schedule ends.
func hang(ctx context.Context, s *sched, what string, hung func(context.Context, string) error) error {
	if _, ok := ctx.Deadline(); !ok {
		return hung(ctx, what)
	}
	if err := s.point(ctx); err != nil {
		return err
	}
	return fmt.Errorf("%w: sim: %s hung until the caller's deadline: %w", ledger.ErrUnavailable, what, context.DeadlineExceeded)
}

// call runs one ledger call through the point and the fault drawn for it.
func call[T any](ctx context.Context, l *faultLedger, what string, fn func(now time.Time) (T, error)) (T, error) {
	var zero T
	if l.clock.firing() {
		return keeperCall(ctx, l, what, fn)
	}
	if err := l.s.point(ctx); err != nil {
		return zero, err
	}
	if l.unbounded {
		ctx = context.WithoutCancel(ctx)
	}
	switch l.f.draw(ctx, what) {
	case faultHang:
		if l.f.rng.IntN(2) == 0 {
			_, _ = fn(l.clock.Now())
		}
		return zero, hang(ctx, l.s, what, l.hung)
	case faultBefore:
		return zero, fmt.Errorf("%w: sim: %s refused before it applied", ledger.ErrUnavailable, what)
	case faultAfter:
		_, _ = fn(l.clock.Now())
		if err := l.s.point(ctx); err != nil {
			return zero, err
		}
		return zero, l.f.afterError(what)
	case faultSlow:
		v, err := fn(l.clock.Now())
		if perr := l.s.point(ctx); perr != nil {
			return zero, perr
		}
		return v, err
	}
	return fn(l.clock.Now())
}

// keeperCall runs a call a worker's lease keeper makes from a timer, on the driver's
// goroutine as the clock moves: it is no scheduling point. The keeper of a crashed
// worker does not run, nor that of a paused one while the actor is parked at a call (its
// whole process is paused); their renewals fail and the lease runs out. A hung job's
// worker is not paused: its keeper renews on.
func keeperCall[T any](ctx context.Context, l *faultLedger, what string, fn func(now time.Time) (T, error)) (T, error) {
	var zero T
	if a := actorFrom(ctx); a != nil && (a.crashed || a.paused && l.s.isParked(a)) {
		return zero, fmt.Errorf("%w: sim: %s not sent: the worker is paused or crashed", ledger.ErrUnavailable, what)
	}
	return fn(l.clock.Now())
}

// observed applies a write to run runID, reading the run just before it (outside the
// faults): the read and the write are one step of the schedule, so the read is the
// state the write applies to (nil: absent). note gets it when the ledger accepted the
// write.
func observed[T any](ctx context.Context, l *faultLedger, runID string, write func() (T, error), note func(before *ledger.Run)) (T, error) {
	before, err := l.Driver.Get(context.WithoutCancel(ctx), &ledger.GetParams{RunID: runID})
	known := err == nil || errors.Is(err, ledger.ErrNotFound)
	v, err := write()
	if err == nil && known {
		note(before)
	}
	return v, err
}

// fenced applies a fenced write of attempt f, noted with the run just before it.
func fenced[T any](ctx context.Context, l *faultLedger, op string, f ledger.Fence, write func() (T, error)) (T, error) {
	return observed(ctx, l, f.RunID, write, func(before *ledger.Run) { l.accepted(op, f, before) })
}

// operator applies an operator's action (the ingress's Act), noted with the run just
// before it.
func (l *faultLedger) operator(ctx context.Context, op string, p *ledger.OperatorParams, act func(context.Context, *ledger.OperatorParams) (*ledger.Run, error)) (*ledger.Run, error) {
	return call(ctx, l, op, func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return observed(ctx, l, p.RunID, func() (*ledger.Run, error) { return act(ctx, &q) }, func(before *ledger.Run) { l.operated(op, before) })
	})
}

func (l *faultLedger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operator(ctx, "retry", p, l.Driver.Retry)
}

func (l *faultLedger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operator(ctx, "cancel", p, l.Driver.Cancel)
}

func (l *faultLedger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operator(ctx, "operator release", p, l.Driver.OperatorRelease)
}

// now is the Now of a call the simulation's clock times: the caller's, or the clock's
// reading; none on a clockless ledger, which judges time by its own clock.
func (l *faultLedger) now(t, now time.Time) time.Time {
	if !t.IsZero() || l.clockless {
		return t
	}
	return now
}

func (l *faultLedger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	return call(ctx, l, "claim", func(now time.Time) (*ledger.ClaimResult, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return l.Driver.Claim(ctx, &q)
	})
}

func (l *faultLedger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return call(ctx, l, "expedite", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return l.Driver.Expedite(ctx, &q)
	})
}

func (l *faultLedger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	return call(ctx, l, "acquire", func(now time.Time) (*ledger.AcquireResult, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		res, err := l.Driver.Acquire(ctx, &q)
		if err == nil && res.Outcome == ledger.OutcomeAcquired {
			l.acquired(res.Run)
		}
		return res, err
	})
}

func (l *faultLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return call(ctx, l, "renew", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		r, err := fenced(ctx, l, "renew", p.Fence, func() (*ledger.Run, error) { return l.Driver.Renew(ctx, &q) })
		if err == nil {
			l.acquired(r) // the lease now runs until r.Deadline
		}
		return r, err
	})
}

func (l *faultLedger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return call(ctx, l, "complete", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return fenced(ctx, l, "complete", p.Fence, func() (*ledger.Run, error) { return l.Driver.Complete(ctx, &q) })
	})
}

func (l *faultLedger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	return call(ctx, l, "release", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return fenced(ctx, l, "release", p.Fence, func() (*ledger.Run, error) { return l.Driver.Release(ctx, &q) })
	})
}

func (l *faultLedger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return call(ctx, l, "fail", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return fenced(ctx, l, "fail", p.Fence, func() (*ledger.Run, error) { return l.Driver.Fail(ctx, &q) })
	})
}

func (l *faultLedger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	return call(ctx, l, "get", func(time.Time) (*ledger.Run, error) { return l.Driver.Get(ctx, p) })
}

func (l *faultLedger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	return call(ctx, l, "begin effect", func(now time.Time) (*ledger.BeginEffectResult, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return fenced(ctx, l, "begin effect", p.Fence, func() (*ledger.BeginEffectResult, error) { return l.Driver.BeginEffect(ctx, &q) })
	})
}

func (l *faultLedger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	return call(ctx, l, "complete effect", func(now time.Time) (*ledger.Effect, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		e, err := fenced(ctx, l, "complete effect", p.Fence, func() (*ledger.Effect, error) { return l.Driver.CompleteEffect(ctx, &q) })
		if err == nil {
			l.effectDone(p.RunID, p.Name)
		}
		return e, err
	})
}

func (l *faultLedger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	return call(ctx, l, "get effect", func(time.Time) (*ledger.Effect, error) { return l.Driver.GetEffect(ctx, p) })
}

func (l *faultLedger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	return call(ctx, l, "list rescue", func(now time.Time) ([]*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		if l.clockless {
			time.Sleep(clocklessPickup + time.Millisecond)
		}
		runs, err := l.Driver.ListRescue(ctx, &q)
		// Runs with one deadline come in the backend's order (a map's, in memory); on
		// the simulation's clock ties are common, and a schedule must replay its seed.
		slices.SortStableFunc(runs, func(a, b *ledger.Run) int {
			return cmp.Or(a.Deadline.Compare(b.Deadline), strings.Compare(a.ID, b.ID))
		})
		return runs, err
	})
}

func (l *faultLedger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	return call(ctx, l, "rescue", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return l.Driver.Rescue(ctx, &q)
	})
}

func (l *faultLedger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	return call(ctx, l, "sweep", func(now time.Time) (int, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		l.sweeping(ctx)
		return l.Driver.Sweep(ctx, &q)
	})
}

func (l *faultLedger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return call(ctx, l, "resolve effect", func(now time.Time) (*ledger.Run, error) {
		q := *p
		q.Now = l.now(q.Now, now)
		return observed(ctx, l, p.RunID, func() (*ledger.Run, error) { return l.Driver.ResolveEffect(ctx, &q) }, func(before *ledger.Run) {
			l.operated("resolve", before)
			l.resolved(p.RunID, p.Effect, p.Done)
		})
	})
}

// faultPublisher publishes into the simulated queue, with the same faults.
type faultPublisher struct {
	s         *sched
	f         *faults
	q         *simQueue
	hung      func(ctx context.Context, what string) error
	unbounded bool
}

func (p *faultPublisher) Publish(ctx context.Context, m *queue.Message) (string, error) {
	if err := p.s.point(ctx); err != nil {
		return "", err
	}
	if p.unbounded {
		ctx = context.WithoutCancel(ctx)
	}
	what := "publish of run " + short(m.Identity.RunID)
	switch p.f.draw(ctx, what) {
	case faultHang:
		if p.f.rng.IntN(2) == 0 {
			p.q.publish(m)
		}
		return "", hang(ctx, p.s, what, p.hung)
	case faultBefore:
		return "", fmt.Errorf("%w: sim: publish refused", queue.ErrUnavailable)
	case faultAfter:
		p.q.publish(m)
		if err := p.s.point(ctx); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%w: sim: published, then the call timed out: %w", queue.ErrUnavailable, context.DeadlineExceeded)
	case faultSlow:
		id := p.q.publish(m)
		if err := p.s.point(ctx); err != nil {
			return "", err
		}
		return id, nil
	}
	return p.q.publish(m), nil
}

func (p *faultPublisher) Ping(context.Context) error { return nil }
