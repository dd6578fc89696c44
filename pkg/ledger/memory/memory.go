package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Scheme is the URL scheme of this backend: memory://NAME.
const Scheme = "memory"

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(openURL))
}

var (
	namedMu sync.Mutex
	named   = map[string]*Ledger{}
)

func openURL(_ context.Context, u *url.URL) (ledger.Ledger, error) {
	if err := ledger.CheckQuery(u); err != nil {
		return nil, err
	}
	name := u.Host + u.Path
	namedMu.Lock()
	defer namedMu.Unlock()
	if l, ok := named[name]; ok {
		return l, nil
	}
	l := New(nil)
	named[name] = l
	return l, nil
}

// Options configure a memory ledger. The zero value is ready to use.
type Options struct {
	// Clock is the store's clock. Defaults to time.Now.
	Clock func() time.Time
}

// Ledger is an in-process ledger. Close does not discard its records.
type Ledger struct {
	clock   func() time.Time
	mu      sync.Mutex
	runs    map[string]*ledger.Run
	effects map[string]*ledger.Effect // by effect key
}

var _ ledger.Ledger = (*Ledger)(nil)

// New returns an empty ledger.
func New(opts *Options) *Ledger {
	if opts == nil {
		opts = &Options{}
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Ledger{
		clock:   clock,
		runs:    map[string]*ledger.Run{},
		effects: map[string]*ledger.Effect{},
	}
}

func (l *Ledger) now(override time.Time) time.Time {
	if !override.IsZero() {
		return override
	}
	return l.clock()
}

// copyRun returns a copy, so callers never share the stored record.
func copyRun(r *ledger.Run) *ledger.Run {
	if r == nil {
		return nil
	}
	c := *r
	c.Payload = bytes.Clone(r.Payload)
	c.Result = bytes.Clone(r.Result)
	c.Progress = bytes.Clone(r.Progress)
	return &c
}

func copyEffect(e *ledger.Effect) *ledger.Effect {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func (l *Ledger) put(r *ledger.Run) {
	if r != nil {
		l.runs[r.ID] = copyRun(r)
	}
}

// update applies a transition to one run under the lock: apply gets a copy of the record
// (nil when absent) and returns the record to store (nil: nothing) and the answer.
func update[T any](l *Ledger, id string, apply func(cur *ledger.Run) (*ledger.Run, T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next, answer, err := apply(copyRun(l.runs[id]))
	if err != nil {
		var zero T
		return zero, err
	}
	l.put(next)
	return answer, nil
}

// Claim implements ledger.Ledger.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.ClaimResult, error) {
		return ledger.ApplyClaim(cur, p, l.now(p.Now))
	})
}

// Expedite implements ledger.Ledger.
func (l *Ledger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		next, err := ledger.ApplyExpedite(cur, p, l.now(p.Now))
		return next, next, err
	})
}

// Acquire implements ledger.Ledger.
func (l *Ledger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.AcquireResult, error) {
		return ledger.ApplyAcquire(cur, p, l.now(p.Now))
	})
}

// Renew implements ledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		next, err := ledger.ApplyRenew(cur, p, l.now(p.Now))
		return next, next, err
	})
}

// Complete implements ledger.Ledger.
func (l *Ledger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		return ledger.ApplyComplete(cur, p, l.now(p.Now))
	})
}

// Release implements ledger.Ledger.
func (l *Ledger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		return ledger.ApplyRelease(cur, p, l.now(p.Now))
	})
}

// Fail implements ledger.Ledger.
func (l *Ledger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		return ledger.ApplyFail(cur, p, l.now(p.Now))
	})
}

// Get implements ledger.Ledger.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.runs[p.RunID]
	if !ok {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return copyRun(r), nil
}

// updateEffect applies a transition to one effect of a run under the lock: apply gets the
// run and a copy of the effect (nil when absent) and returns the effect to store (nil:
// nothing) and the answer.
func updateEffect[T any](l *Ledger, runID, name string, apply func(run *ledger.Run, cur *ledger.Effect) (*ledger.Effect, T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ledger.EffectKey(runID, name)
	next, answer, err := apply(l.runs[runID], copyEffect(l.effects[key]))
	if err != nil {
		var zero T
		return zero, err
	}
	if next != nil {
		l.effects[key] = copyEffect(next)
	}
	return answer, nil
}

// BeginEffect implements ledger.Ledger.
func (l *Ledger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	return updateEffect(l, p.RunID, p.Name, func(run *ledger.Run, cur *ledger.Effect) (*ledger.Effect, *ledger.BeginEffectResult, error) {
		return ledger.ApplyBeginEffect(run, cur, p, l.now(p.Now))
	})
}

// CompleteEffect implements ledger.Ledger.
func (l *Ledger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	return updateEffect(l, p.RunID, p.Name, func(run *ledger.Run, cur *ledger.Effect) (*ledger.Effect, *ledger.Effect, error) {
		return ledger.ApplyCompleteEffect(run, cur, p, l.now(p.Now))
	})
}

// GetEffect implements ledger.Ledger.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.effects[ledger.EffectKey(p.RunID, p.Name)]
	if !ok {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return copyEffect(e), nil
}

// ListRescue implements ledger.Ledger.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := ledger.Truncate(l.now(p.Now))
	var out []*ledger.Run
	for _, r := range l.runs {
		if ledger.NeedsRescue(r, now) {
			out = append(out, copyRun(r))
		}
	}
	slices.SortFunc(out, func(a, b *ledger.Run) int { return a.Deadline.Compare(b.Deadline) })
	if limit := cmp.Or(p.Limit, 100); len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Rescue implements ledger.Ledger.
func (l *Ledger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	return update(l, p.RunID, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		next, err := ledger.ApplyRescue(cur, p, l.now(p.Now))
		return next, next, err
	})
}

// Sweep implements ledger.Ledger.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := ledger.Truncate(l.now(p.Now))
	limit := cmp.Or(p.Limit, 500)
	n := 0
	for id, r := range l.runs {
		if n < limit && r.ExpireAt.Before(now) {
			delete(l.runs, id)
			n++
		}
	}
	// An effect goes only with its run (or after it): a live run's effects are kept
	// whatever their own ExpireAt says, or a later attempt would redo them.
	for k, e := range l.effects {
		if _, live := l.runs[e.RunID]; n < limit && !live && e.ExpireAt.Before(now) {
			delete(l.effects, k)
			n++
		}
	}
	return n, nil
}

// Ping implements ledger.Ledger.
func (l *Ledger) Ping(ctx context.Context) error { return nil }

// Close implements ledger.Ledger. The records stay: a store opened by name is shared.
func (l *Ledger) Close() error { return nil }
