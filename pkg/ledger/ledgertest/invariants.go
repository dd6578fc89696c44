package ledgertest

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// checked wraps the driver under test (the Ledger in front of it validates each call
// first, as for a program) and checks, after every transition the suite
// makes, the invariants every backend must keep whatever the test asserts:
//
//   - a run a transition wrote keeps ExpireAt ≥ max(Deadline, NotBefore) + the call's
//     retention, so that no sweeper deletes a run before its retry or rescue is due (nor
//     sooner than a retention after it);
//   - any run a call returns keeps ExpireAt after max(Deadline, NotBefore);
//   - after a Sweep, every effect the test began whose run still exists still exists:
//     an effect lives at least as long as its run.
type checked struct {
	ledger.Driver
	t testing.TB

	mu      sync.Mutex
	effects map[[2]string]bool // run ID, effect name
}

// check returns the ledger in front of d behind the invariant checks.
func check(t testing.TB, d ledger.Driver) *ledger.Ledger {
	return ledger.New(&checked{Driver: d, t: t}, nil)
}

// expiryTolerance absorbs rounding of stored times.
const expiryTolerance = time.Millisecond

func (c *checked) written(op string, r *ledger.Run, keep time.Duration) {
	if r == nil {
		return
	}
	c.t.Helper()
	due := latest(r.Deadline, r.NotBefore)
	if want := due.Add(cmp.Or(keep, ledger.DefaultRetention)); r.ExpireAt.Before(want.Add(-expiryTolerance)) {
		c.t.Errorf("invariant: after %s, run %s (%s) has ExpireAt %v, before max(Deadline %v, NotBefore %v) + retention %v = %v: a sweeper could delete it before it is due",
			op, r.ID, r.Status, r.ExpireAt, r.Deadline, r.NotBefore, cmp.Or(keep, ledger.DefaultRetention), want)
	}
	c.returned(op, r)
}

func (c *checked) returned(op string, r *ledger.Run) {
	if r == nil {
		return
	}
	c.t.Helper()
	if due := latest(r.Deadline, r.NotBefore); !r.ExpireAt.After(due) {
		c.t.Errorf("invariant: after %s, run %s (%s) has ExpireAt %v, not after max(Deadline, NotBefore) = %v",
			op, r.ID, r.Status, r.ExpireAt, due)
	}
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func (c *checked) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	res, err := c.Driver.Claim(ctx, p)
	if err == nil {
		c.t.Helper()
		if res.Created {
			c.written("Claim", res.Run, p.Retention)
		} else {
			c.returned("Claim (duplicate)", res.Run)
		}
	}
	return res, err
}

func (c *checked) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	r, err := c.Driver.Expedite(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Expedite", r, p.Retention)
	}
	return r, err
}

func (c *checked) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	res, err := c.Driver.Acquire(ctx, p)
	if err == nil {
		c.t.Helper()
		if res.Outcome == ledger.OutcomeAcquired {
			c.written("Acquire", res.Run, p.Retention)
		} else {
			c.returned("Acquire ("+res.Outcome.String()+")", res.Run)
		}
	}
	return res, err
}

func (c *checked) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	r, err := c.Driver.Renew(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Renew", r, p.Retention)
	}
	return r, err
}

func (c *checked) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	r, err := c.Driver.Complete(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Complete", r, p.Retention)
	}
	return r, err
}

func (c *checked) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	r, err := c.Driver.Release(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Release", r, p.Retention)
	}
	return r, err
}

func (c *checked) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	r, err := c.Driver.Fail(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Fail", r, p.Retention)
	}
	return r, err
}

func (c *checked) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	r, err := c.Driver.Rescue(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Rescue", r, p.Retention)
	}
	return r, err
}

func (c *checked) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	res, err := c.Driver.BeginEffect(ctx, p)
	if err == nil {
		c.mu.Lock()
		if c.effects == nil {
			c.effects = map[[2]string]bool{}
		}
		c.effects[[2]string{p.RunID, p.Name}] = true
		c.mu.Unlock()
	}
	return res, err
}

func (c *checked) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	n, err := c.Driver.Sweep(ctx, p)
	if err != nil {
		return n, err
	}
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.effects {
		if _, err := c.Driver.Get(ctx, &ledger.GetParams{RunID: k[0]}); err != nil {
			continue // the run is gone (or unreadable): its effects may go
		}
		if _, err := c.Driver.GetEffect(ctx, &ledger.GetEffectParams{RunID: k[0], Name: k[1]}); errors.Is(err, ledger.ErrNotFound) {
			c.t.Errorf("invariant: after Sweep, effect %q of run %s is gone while its run exists: a later attempt would redo it", k[1], k[0])
		}
	}
	return n, err
}

func (c *checked) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	r, err := c.Driver.Get(ctx, p)
	if err == nil {
		c.t.Helper()
		c.returned("Get", r)
	}
	return r, err
}

func (c *checked) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	r, err := c.Driver.Retry(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Retry", r, p.Retention)
	}
	return r, err
}

func (c *checked) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	r, err := c.Driver.Cancel(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("Cancel", r, p.Retention)
	}
	return r, err
}

func (c *checked) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	r, err := c.Driver.ResolveEffect(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("ResolveEffect", r, p.Retention)
	}
	return r, err
}

func (c *checked) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	r, err := c.Driver.OperatorRelease(ctx, p)
	if err == nil {
		c.t.Helper()
		c.written("OperatorRelease", r, p.Retention)
	}
	return r, err
}
