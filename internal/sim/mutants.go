package sim

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Mutants are deliberately broken ledgers, each a copy of a hole the simulation must
// find: TestMutantsAreCaught checks that it does within the CI budget.
var Mutants = map[string]func(ledger.Ledger) ledger.Ledger{
	// The ingress's old Unclaim: a claim whose publish failed (or whose claim call
	// failed after it landed) is deleted, though a concurrent duplicate may already
	// have been answered 2xx for it (issue 12).
	"unclaim": func(l ledger.Ledger) ledger.Ledger { return newDeleting(l) },
	// The worker claim checks no payload: a stale or forged message runs (issue 12).
	"any-payload": func(l ledger.Ledger) ledger.Ledger { return &anyPayload{l} },
	// The worker claim takes over live leases.
	"steal-leases": func(l ledger.Ledger) ledger.Ledger { return &stealing{l} },
	// BeginEffect forgets that an earlier attempt did the effect.
	"forget-effects": func(l ledger.Ledger) ledger.Ledger { return &forgetful{l} },
	// Every ingress claim believes it created the run.
	"two-claim-winners": func(l ledger.Ledger) ledger.Ledger { return &lyingClaim{l} },
}

type anyPayload struct{ ledger.Ledger }

func (b *anyPayload) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	q := *p
	if r, err := b.Ledger.Get(ctx, &ledger.GetParams{RunID: p.RunID}); err == nil {
		q.PayloadHash = r.PayloadHash
	}
	return b.Ledger.Acquire(ctx, &q)
}

type stealing struct{ ledger.Ledger }

func (b *stealing) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	res, err := b.Ledger.Acquire(ctx, p)
	if err == nil && res.Outcome == ledger.OutcomeHeld && res.Run.Status == ledger.StatusRunning {
		q := *p
		q.Now = res.Until.Add(time.Millisecond)
		return b.Ledger.Acquire(ctx, &q)
	}
	return res, err
}

type forgetful struct{ ledger.Ledger }

func (b *forgetful) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	res, err := b.Ledger.BeginEffect(ctx, p)
	if err == nil {
		res.Done = false
	}
	return res, err
}

type lyingClaim struct{ ledger.Ledger }

func (b *lyingClaim) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	res, err := b.Ledger.Claim(ctx, p)
	if err == nil {
		res.Created = true
	}
	return res, err
}

// deleting is a ledger whose Expedite deletes the run, as Unclaim did. A deleted run's
// record is left behind in the ledger under it, and the run ID is mapped to a fresh
// one: to every caller the run is gone, and a later claim creates it anew.
type deleting struct {
	ledger.Ledger
	mu   sync.Mutex
	gen  map[string]int    // run ID → generation
	back map[string]string // stored ID → run ID
}

func newDeleting(l ledger.Ledger) *deleting {
	return &deleting{Ledger: l, gen: map[string]int{}, back: map[string]string{}}
}

func (d *deleting) to(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	res, err := d.Ledger.Claim(ctx, &q)
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
	r, err := d.Ledger.Expedite(ctx, &q)
	if err == nil {
		d.mu.Lock()
		d.gen[p.RunID]++ // deleted
		d.mu.Unlock()
	}
	return d.run(r, err)
}

func (d *deleting) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	q := *p
	q.RunID = d.to(p.RunID)
	res, err := d.Ledger.Acquire(ctx, &q)
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
	return d.run(d.Ledger.Renew(ctx, &q))
}

func (d *deleting) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Ledger.Complete(ctx, &q))
}

func (d *deleting) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Ledger.Release(ctx, &q))
}

func (d *deleting) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	return d.run(d.Ledger.Fail(ctx, &q))
}

func (d *deleting) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	return d.run(d.Ledger.Get(ctx, &ledger.GetParams{RunID: d.to(p.RunID)}))
}

func (d *deleting) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	q := *p
	q.Fence = d.fence(p.Fence)
	res, err := d.Ledger.BeginEffect(ctx, &q)
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
	e, err := d.Ledger.CompleteEffect(ctx, &q)
	return d.effect(e, p.RunID, err)
}

func (d *deleting) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	e, err := d.Ledger.GetEffect(ctx, &ledger.GetEffectParams{RunID: d.to(p.RunID), Name: p.Name})
	return d.effect(e, p.RunID, err)
}

func (d *deleting) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	runs, err := d.Ledger.ListRescue(ctx, p)
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
	return d.run(d.Ledger.Rescue(ctx, &q))
}
