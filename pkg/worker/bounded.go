package worker

import (
	"context"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// boundedLedger gives every ledger call of the worker its own timeout, so that a
// blackholed connection cannot hold a delivery slot (or the rescuer) while Pub/Sub
// keeps extending the message's ack deadline. A call's own, earlier deadline still wins:
// what the lease leaves, for a worker claim and a renewal (the lease keeper's self-fence
// point). A backend retries contention within the deadline it is given (a Spanner
// transaction Spanner aborted, a Firestore write whose document changed), so a call
// that could not finish before its lease ends does not go on past it.
type boundedLedger struct {
	ledger.Ledger
	timeout time.Duration
}

func bound[P, R any](l *boundedLedger, ctx context.Context, p P, call func(context.Context, P) (R, error)) (R, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return call(ctx, p)
}

func (l *boundedLedger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	return bound(l, ctx, p, l.Ledger.Claim)
}

func (l *boundedLedger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Expedite)
}

func (l *boundedLedger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	return bound(l, ctx, p, l.Ledger.Acquire)
}

func (l *boundedLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Renew)
}

func (l *boundedLedger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Complete)
}

func (l *boundedLedger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Release)
}

func (l *boundedLedger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Fail)
}

func (l *boundedLedger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Get)
}

func (l *boundedLedger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	return bound(l, ctx, p, l.Ledger.BeginEffect)
}

func (l *boundedLedger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	return bound(l, ctx, p, l.Ledger.CompleteEffect)
}

func (l *boundedLedger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	return bound(l, ctx, p, l.Ledger.GetEffect)
}

func (l *boundedLedger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.ListRescue)
}

func (l *boundedLedger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.Rescue)
}

func (l *boundedLedger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	return bound(l, ctx, p, l.Ledger.Sweep)
}

func (l *boundedLedger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return bound(l, ctx, p, l.Ledger.ResolveEffect)
}

func (l *boundedLedger) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.Ledger.Ping(ctx)
}
