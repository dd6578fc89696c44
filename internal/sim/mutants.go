package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Mutants are deliberately broken ledgers, each a copy of a hole the simulation must
// find: TestMutantsAreCaught checks that it does within the CI budget.
var Mutants = map[string]func(ledger.Driver) ledger.Driver{
	// The ingress's old Unclaim: a claim whose publish failed (or whose claim call
	// failed after it landed) is deleted, though a concurrent duplicate may already
	// have been answered 2xx for it (issue 12).
	"unclaim": func(l ledger.Driver) ledger.Driver { d := newDeleting(l); d.unclaim = true; return d },
	// The worker claim checks no payload: a stale or forged message runs (issue 12).
	"any-payload": func(l ledger.Driver) ledger.Driver { return &anyPayload{l} },
	// The worker claim takes over live leases.
	"steal-leases": func(l ledger.Driver) ledger.Driver { return &stealing{l} },
	// BeginEffect forgets that an earlier attempt did the effect.
	"forget-effects": func(l ledger.Driver) ledger.Driver { return &forgetful{Driver: l} },
	// Every ingress claim believes it created the run.
	"two-claim-winners": func(l ledger.Driver) ledger.Driver { return &lyingClaim{l} },
	// The old ExpiryOf: a record expires a retention after its last write, though its
	// not-before (a late Retry-After) or its deadline is still ahead, and the sweeper
	// deletes a run that is waiting for its retry (issue 12).
	"expiry-ignores-deadlines": func(l ledger.Driver) ledger.Driver { return &expiring{newDeleting(l)} },
	// The old sweep: an effect goes when its own ExpireAt passes, though its run still
	// lives, and a later attempt does it again (issue 12).
	"sweeps-live-effects": func(l ledger.Driver) ledger.Driver { return newEffectSweeper(l) },
	// The worker's old age check: a message older than the retention is dropped even
	// when its run exists, so a run that lives past the retention (a late retry, a
	// rescued run, whose messages carry its creation time) is never run again (issue
	// 12). The claim with MustExist answers as if the run were absent.
	"old-messages-dropped": func(l ledger.Driver) ledger.Driver { return &oldDropped{l} },
	// A finishing write without its fence, as Redis's finish script that skips it (issue
	// 40): a stale attempt whose complete or fail is refused completes or fails the run
	// another attempt took over, in that attempt's name. The conformance suite catches
	// it; before the simulation checked who finished a run, no schedule did.
	"unfenced-finish": func(l ledger.Driver) ledger.Driver { return &unfencedFinish{l} },
	// A cancel answered as done without being written: the operator is told the run is
	// cancelled, and it goes on to complete.
	"lying-cancel": func(l ledger.Driver) ledger.Driver { return &lyingCancel{l} },
	// BeginEffect forgets that a batch's group of items was done: a later attempt does
	// every item again.
	"forget-batch-groups": func(l ledger.Driver) ledger.Driver { return &forgetful{Driver: l, prefix: "batch/"} },
	// ResolveEffect requeues the run as a retry and drops the operator's verdict: an
	// effect resolved as done stays pending, and the next attempt does it again.
	"resolve-only-retries": func(l ledger.Driver) ledger.Driver { return &resolveRetries{l} },
}

// UnboundedCalls names the mutant whose workers make their ledger calls and
// republishes with no deadline, as before worker.Config.LedgerTimeout: a blackholed
// call holds its delivery (or the rescuer) forever. It is a switch of the workers'
// fault wrappers, not a ledger.
const UnboundedCalls = "unbounded-calls"

// IgnoresMaxRunTime names the mutant whose workers never stop a job at its maximum run
// time, as before worker.Config.MaxRunTime: a hung Go handler's lease keeper renews its
// lease for ever, and its run never ends. It is a worker option (a MaxRunTime of a
// century), not a ledger.
const IgnoresMaxRunTime = "ignores-max-run-time"

// forever is the mutant ignores-max-run-time's MaxRunTime.
const forever = 100 * 365 * 24 * time.Hour

// MutantNames returns the names of every mutant, sorted.
func MutantNames() []string {
	names := []string{UnboundedCalls, IgnoresMaxRunTime, LostAnswerRefused}
	for name := range Mutants {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

type unfencedFinish struct{ ledger.Driver }

// holder returns the fence of the attempt holding f's run, or ok false when none does.
func (b *unfencedFinish) holder(ctx context.Context, f ledger.Fence) (ledger.Fence, bool) {
	r, err := b.Driver.Get(ctx, &ledger.GetParams{RunID: f.RunID})
	if err != nil || r.Status != ledger.StatusRunning {
		return f, false
	}
	return ledger.Fence{RunID: f.RunID, Attempt: r.Attempt, AttemptID: r.AttemptID}, true
}

func (b *unfencedFinish) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	r, err := b.Driver.Complete(ctx, p)
	if f, ok := b.holder(ctx, p.Fence); errors.Is(err, ledger.ErrLeaseLost) && ok {
		q := *p
		q.Fence = f
		return b.Driver.Complete(ctx, &q)
	}
	return r, err
}

func (b *unfencedFinish) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	r, err := b.Driver.Fail(ctx, p)
	if f, ok := b.holder(ctx, p.Fence); errors.Is(err, ledger.ErrLeaseLost) && ok {
		q := *p
		q.Fence = f
		return b.Driver.Fail(ctx, &q)
	}
	return r, err
}

type lyingCancel struct{ ledger.Driver }

func (b *lyingCancel) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	r, err := b.Driver.Get(ctx, &ledger.GetParams{RunID: p.RunID})
	if err != nil || r.Status != ledger.StatusQueued && r.Status != ledger.StatusRunning || p.Attempt != 0 && p.Attempt != r.Attempt {
		return b.Driver.Cancel(ctx, p) // the refusal is the real one
	}
	r.Status, r.Deadline, r.CompletedAt = ledger.StatusCancelled, time.Time{}, p.Now
	return r, nil
}

type resolveRetries struct{ ledger.Driver }

func (b *resolveRetries) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	if _, err := b.Driver.GetEffect(ctx, &ledger.GetEffectParams{RunID: p.RunID, Name: p.Effect}); err != nil {
		return nil, err
	}
	return b.Driver.Retry(ctx, &p.OperatorParams)
}

type oldDropped struct{ ledger.Driver }

func (b *oldDropped) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	if p.MustExist {
		return nil, fmt.Errorf("%w: sim: run %s treated as absent: its message is older than the retention", ledger.ErrNotFound, p.RunID)
	}
	return b.Driver.Acquire(ctx, p)
}

// expiring deletes (as deleting does) every run whose last write is a retention ago
// when a sweep applies, whatever its deadline and not-before say.
type expiring struct{ *deleting }

func (e *expiring) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	e.mu.Lock()
	ids := make([]string, 0, len(e.known))
	for id := range e.known {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	slices.Sort(ids)
	n := 0
	for _, id := range ids {
		r, err := e.Driver.Get(ctx, &ledger.GetParams{RunID: e.to(id)})
		if err != nil {
			continue
		}
		old := driver.Micros(r.UpdatedAt.Add(retention))
		if old.Before(p.Now) && r.ExpireAt.After(old) { // the fixed ExpiryOf keeps it
			e.mu.Lock()
			e.gen[id]++
			e.mu.Unlock()
			n++
		}
	}
	m, err := e.Driver.Sweep(ctx, p)
	return n + m, err
}

// effectSweeper forgets, as a sweep applies, every effect past its own ExpireAt, live
// run or not: a later BeginEffect finds it new.
type effectSweeper struct {
	ledger.Driver
	mu    sync.Mutex
	seen  map[[2]string]bool
	swept map[[2]string]bool
}

func newEffectSweeper(l ledger.Driver) *effectSweeper {
	return &effectSweeper{Driver: l, seen: map[[2]string]bool{}, swept: map[[2]string]bool{}}
}

func (s *effectSweeper) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	s.mu.Lock()
	keys := make([][2]string, 0, len(s.seen))
	for k := range s.seen {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	n := 0
	for _, k := range keys {
		e, err := s.Driver.GetEffect(ctx, &ledger.GetEffectParams{RunID: k[0], Name: k[1]})
		if err == nil && e.ExpireAt.Before(p.Now) {
			s.mu.Lock()
			s.swept[k] = true
			s.mu.Unlock()
			n++
		}
	}
	m, err := s.Driver.Sweep(ctx, p)
	return n + m, err
}

func (s *effectSweeper) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	k := [2]string{p.RunID, p.Name}
	res, err := s.Driver.BeginEffect(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[k] = true
	if err != nil || !s.swept[k] {
		return res, err
	}
	delete(s.swept, k)
	return &ledger.BeginEffectResult{Effect: &ledger.Effect{
		Key: ledger.EffectKey(p.RunID, p.Name), RunID: p.RunID, Name: p.Name, Status: ledger.EffectPending, Attempt: p.Attempt,
	}}, nil
}

type anyPayload struct{ ledger.Driver }

func (b *anyPayload) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	q := *p
	if r, err := b.Driver.Get(ctx, &ledger.GetParams{RunID: p.RunID}); err == nil {
		q.PayloadHash = r.PayloadHash
	}
	return b.Driver.Acquire(ctx, &q)
}

type stealing struct{ ledger.Driver }

func (b *stealing) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	res, err := b.Driver.Acquire(ctx, p)
	if err == nil && res.Outcome == ledger.OutcomeHeld && res.Run.Status == ledger.StatusRunning {
		q := *p
		q.Now = res.Until.Add(time.Millisecond)
		return b.Driver.Acquire(ctx, &q)
	}
	return res, err
}

// forgetful's BeginEffect forgets that the effects whose name starts with prefix were
// done (every effect's when it is empty).
type forgetful struct {
	ledger.Driver
	prefix string
}

func (b *forgetful) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	res, err := b.Driver.BeginEffect(ctx, p)
	if err == nil && strings.HasPrefix(p.Name, b.prefix) {
		res.Done = false
	}
	return res, err
}

type lyingClaim struct{ ledger.Driver }

func (b *lyingClaim) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	res, err := b.Driver.Claim(ctx, p)
	if err == nil {
		res.Created = true
	}
	return res, err
}

// deleting is a ledger whose Expedite deletes the run, as Unclaim did. A deleted run's
// record is left behind in the ledger under it, and the run ID is mapped to a fresh
// one: to every caller the run is gone, and a later claim creates it anew.
type deleting struct {
	ledger.Driver
	// unclaim makes Expedite delete the run.
	unclaim bool
	mu      sync.Mutex
	gen     map[string]int    // run ID → generation
	back    map[string]string // stored ID → run ID
	known   map[string]bool   // every run ID called with
}

func newDeleting(l ledger.Driver) *deleting {
	return &deleting{Driver: l, gen: map[string]int{}, back: map[string]string{}, known: map[string]bool{}}
}

func (d *deleting) to(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.known[id] = true
	g := d.gen[id]
	if g == 0 {
		return id
	}
	p := ledger.KeyedRunID("deleted", id, strconv.Itoa(g))
	d.back[p] = id
	return p
}

// from maps a stored run back; ok is false for a deleted generation.
func (d *deleting) from(r *ledger.Run) (*ledger.Run, bool) {
	if r == nil {
		return nil, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := *r
	if id, mapped := d.back[r.ID]; mapped {
		c.ID = id
	}
	g := d.gen[c.ID]
	cur := c.ID
	if g > 0 {
		cur = ledger.KeyedRunID("deleted", c.ID, strconv.Itoa(g))
	}
	return &c, cur == r.ID
}

func (d *deleting) run(r *ledger.Run, err error) (*ledger.Run, error) {
	c, _ := d.from(r)
	return c, err
}

func (d *deleting) effect(e *ledger.Effect, id string, err error) (*ledger.Effect, error) {
	if e == nil {
		return nil, err
	}
	c := *e
	c.RunID, c.Key = id, ledger.EffectKey(id, e.Name)
	return &c, err
}

func (d *deleting) fence(f ledger.Fence) ledger.Fence { f.RunID = d.to(f.RunID); return f }

func (d *deleting) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	q := *p
	q.RunID = d.to(p.RunID)
	res, err := d.Driver.Claim(ctx, &q)
	if res != nil {
		c := *res
		c.Run, _ = d.from(res.Run)
		res = &c
	}
	return res, err
}

func (d *deleting) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	q := *p
	q.RunID = d.to(p.RunID)
	r, err := d.Driver.Expedite(ctx, &q)
	if err == nil && d.unclaim {
		d.mu.Lock()
		d.gen[p.RunID]++ // deleted
		d.mu.Unlock()
	}
	return d.run(r, err)
}

func (d *deleting) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	q := *p
	q.RunID = d.to(p.RunID)
	res, err := d.Driver.Acquire(ctx, &q)
	if res != nil {
		c := *res
		c.Run, _ = d.from(res.Run)
		res = &c
	}
	return res, err
}

func (d *deleting) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Driver.Renew(ctx, &q))
}

func (d *deleting) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Driver.Complete(ctx, &q))
}

func (d *deleting) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Driver.Release(ctx, &q))
}

func (d *deleting) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Driver.Fail(ctx, &q))
}

func (d *deleting) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	return d.run(d.Driver.Get(ctx, &ledger.GetParams{RunID: d.to(p.RunID)}))
}

func (d *deleting) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	res, err := d.Driver.BeginEffect(ctx, &q)
	if res != nil {
		c := *res
		c.Effect, _ = d.effect(res.Effect, p.RunID, nil)
		res = &c
	}
	return res, err
}

func (d *deleting) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	e, err := d.Driver.CompleteEffect(ctx, &q)
	return d.effect(e, p.RunID, err)
}

func (d *deleting) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	e, err := d.Driver.GetEffect(ctx, &ledger.GetEffectParams{RunID: d.to(p.RunID), Name: p.Name})
	return d.effect(e, p.RunID, err)
}

func (d *deleting) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	runs, err := d.Driver.ListRescue(ctx, p)
	out := runs[:0]
	for _, r := range runs {
		if c, live := d.from(r); live {
			out = append(out, c)
		}
	}
	return out, err
}

func (d *deleting) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	q := *p
	q.RunID = d.to(p.RunID)
	return d.run(d.Driver.Rescue(ctx, &q))
}
