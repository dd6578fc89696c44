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

// Claim implements ledger.Ledger.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next, res, err := ledger.ApplyClaim(copyRun(l.runs[p.RunID]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	l.put(next)
	return res, nil
}

// Unclaim implements ledger.Ledger.
func (l *Ledger) Unclaim(ctx context.Context, p *ledger.UnclaimParams) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ledger.CheckUnclaim(l.runs[p.RunID], p); err != nil {
		return err
	}
	delete(l.runs, p.RunID)
	return nil
}

// Acquire implements ledger.Ledger.
func (l *Ledger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next, res, err := ledger.ApplyAcquire(copyRun(l.runs[p.RunID]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	l.put(next)
	return res, nil
}

// Renew implements ledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next, err := ledger.ApplyRenew(copyRun(l.runs[p.RunID]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	l.put(next)
	return next, nil
}

// Complete implements ledger.Ledger.
func (l *Ledger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(ledger.ApplyComplete(copyRun(l.runs[p.RunID]), p, l.now(p.Now)))
}

// Release implements ledger.Ledger.
func (l *Ledger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(ledger.ApplyRelease(copyRun(l.runs[p.RunID]), p, l.now(p.Now)))
}

// Fail implements ledger.Ledger.
func (l *Ledger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(ledger.ApplyFail(copyRun(l.runs[p.RunID]), p, l.now(p.Now)))
}

func (l *Ledger) write(next, answer *ledger.Run, err error) (*ledger.Run, error) {
	if err != nil {
		return nil, err
	}
	l.put(next)
	return copyRun(answer), nil
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

// BeginEffect implements ledger.Ledger.
func (l *Ledger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ledger.EffectKey(p.RunID, p.Name)
	next, res, err := ledger.ApplyBeginEffect(l.runs[p.RunID], copyEffect(l.effects[key]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	if next != nil {
		l.effects[key] = copyEffect(next)
	}
	return res, nil
}

// CompleteEffect implements ledger.Ledger.
func (l *Ledger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ledger.EffectKey(p.RunID, p.Name)
	next, answer, err := ledger.ApplyCompleteEffect(l.runs[p.RunID], copyEffect(l.effects[key]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	if next != nil {
		l.effects[key] = copyEffect(next)
	}
	return copyEffect(answer), nil
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
	l.mu.Lock()
	defer l.mu.Unlock()
	next, err := ledger.ApplyRescue(copyRun(l.runs[p.RunID]), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	l.put(next)
	return next, nil
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
	for k, e := range l.effects {
		if n < limit && e.ExpireAt.Before(now) {
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
