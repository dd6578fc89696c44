package memory

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
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

func openURL(_ context.Context, u *url.URL) (ledger.Driver, error) {
	if err := driver.CheckQuery(u); err != nil {
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

// Ledger is an in-process ledger. Close does not discard its records. The fenced
// transitions are driver.Transitions over the store's maps.
type Ledger struct {
	driver.Transitions
	clock   func() time.Time
	mu      sync.Mutex
	runs    map[string]*ledger.Run
	effects map[string]*ledger.Effect // by effect key
}

var _ ledger.Driver = (*Ledger)(nil)

// New returns an empty ledger.
func New(opts *Options) *Ledger {
	if opts == nil {
		opts = &Options{}
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	l := &Ledger{
		clock:   clock,
		runs:    map[string]*ledger.Run{},
		effects: map[string]*ledger.Effect{},
	}
	l.Transitions = driver.Transitions{Store: store{l}}
	return l
}

func (l *Ledger) now(override time.Time) time.Time {
	if !override.IsZero() {
		return override
	}
	return l.clock()
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
		l.runs[r.ID] = r.Clone()
	}
}

// store is the driver.Store of the ledger: each update runs under the ledger's lock.
type store struct{ l *Ledger }

// UpdateRun implements driver.Store.
func (s store) UpdateRun(_ context.Context, _, id string, override time.Time, decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	next, err := decide(s.l.runs[id].Clone(), s.l.now(override))
	if err != nil {
		return err
	}
	s.l.put(next)
	return nil
}

// UpdateEffect implements driver.Store: UpdateRunAndEffect writing the effect alone.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	return s.UpdateRunAndEffect(ctx, op, runID, name, override, driver.EffectAlone(decide))
}

// UpdateRunAndEffect implements driver.Store.
func (s store) UpdateRunAndEffect(_ context.Context, _, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	key := ledger.EffectKey(runID, name)
	run, eff, err := decide(s.l.runs[runID].Clone(), copyEffect(s.l.effects[key]), s.l.now(override))
	if err != nil {
		return err
	}
	s.l.put(run)
	if eff != nil {
		s.l.effects[key] = copyEffect(eff)
	}
	return nil
}

// Claim implements ledger.Driver.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next, res, err := driver.ApplyClaim(l.runs[p.RunID].Clone(), p, l.now(p.Now))
	if err != nil {
		return nil, err
	}
	l.put(next)
	return res, nil
}

// Get implements ledger.Driver.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.runs[p.RunID]
	if !ok {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return r.Clone(), nil
}

// GetEffect implements ledger.Driver.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.effects[ledger.EffectKey(p.RunID, p.Name)]
	if !ok {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return copyEffect(e), nil
}

// ListRescue implements ledger.Driver.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := driver.Micros(l.now(p.Now))
	var out []*ledger.Run
	for _, r := range l.runs {
		if driver.NeedsRescue(r, now) {
			out = append(out, r.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *ledger.Run) int { return a.Deadline.Compare(b.Deadline) })
	if limit := cmp.Or(p.Limit, 100); len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Sweep implements ledger.Driver.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := driver.Micros(l.now(p.Now))
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

// Ping implements ledger.Driver.
func (l *Ledger) Ping(ctx context.Context) error { return nil }

// Close implements ledger.Driver. The records stay: a store opened by name is shared.
func (l *Ledger) Close() error { return nil }
