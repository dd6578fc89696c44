package driver

import (
	"context"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Store is what a backend provides when it can read a record and write it back
// atomically (memory, sqlite, firestore, spanner): Transitions builds the state
// machine's transitions of ledger.Driver on it, so that the rules are applied in one
// place and a backend writes only its storage.
//
// In both methods, override is the caller's Now (a test's clock) when it is not zero: a
// backend that cannot replace its clock refuses it with ledger.ErrNowUnsupported.
// decide may run more than once when the backend retries after contention; only the
// last run's verdict counts. An error from decide is a verdict: it is returned as it
// is, and nothing is written.
type Store interface {
	// UpdateRun reads run id (nil when absent), calls decide with it and the ledger's
	// now, and writes the record decide returns (nil: nothing), so that no other write
	// to the run lands between the read and the write. op names the transition in
	// errors.
	UpdateRun(ctx context.Context, op, id string, override time.Time,
		decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error
	// UpdateEffect reads run runID and its effect name (each nil when absent), calls
	// decide, and writes the effect it returns (nil: nothing) only while the run is
	// still as read: the run's fence guards the effect's write. decide looks at the
	// run's fence only (ID, Status, Attempt, AttemptID): a backend may read just those,
	// so as not to contend with the holder's renewals, which write other fields.
	UpdateEffect(ctx context.Context, op, runID, name string, override time.Time,
		decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error
	// UpdateRunAndEffect reads run runID and its effect name (each nil when absent),
	// calls decide, and writes the run and the effect it returns (each nil: not that
	// one) in one atomic write, only while both are still as read.
	UpdateRunAndEffect(ctx context.Context, op, runID, name string, override time.Time,
		decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error
}

// EffectAlone adapts an effect's decision to Store.UpdateRunAndEffect: it writes no run.
// A Store whose UpdateEffect is UpdateRunAndEffect writing the effect alone uses it.
func EffectAlone(decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error),
) func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error) {
	return func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error) {
		next, err := decide(run, cur, now)
		return nil, next, err
	}
}

// Transitions implements the transitions of ledger.Driver that read and write one run
// or one effect — Expedite, Acquire, Renew, Complete, Release, Fail, Rescue,
// BeginEffect and CompleteEffect, and the operators' Retry, Cancel, OperatorRelease
// and ResolveEffect (a run and one of its effects) — on a Store. A backend embeds it
// and writes the rest (Claim, the reads, ListRescue, Sweep, Ping, Close) itself; a
// method the backend defines takes precedence over the embedded one.
type Transitions struct {
	Store Store
}

// runTransition runs rule (which returns the record to write and the
// answer) in one UpdateRun.
func runTransition[T any](ctx context.Context, s Store, op, id string, override time.Time,
	rule func(cur *ledger.Run, now time.Time) (*ledger.Run, T, error),
) (T, error) {
	var answer, zero T
	err := s.UpdateRun(ctx, op, id, override, func(cur *ledger.Run, now time.Time) (*ledger.Run, error) {
		next, a, err := rule(cur, now)
		answer = a
		return next, err
	})
	if err != nil {
		return zero, err
	}
	return answer, nil
}

// same adapts a rule whose record to write is also its answer.
func same(rule func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) func(*ledger.Run, time.Time) (*ledger.Run, *ledger.Run, error) {
	return func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
		next, err := rule(cur, now)
		return next, next, err
	}
}

// Expedite implements ledger.Driver.
func (t Transitions) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "expedite", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyExpedite(cur, p, now) }))
}

// Acquire implements ledger.Driver.
func (t Transitions) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	return runTransition(ctx, t.Store, "acquire", p.RunID, p.Now,
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.AcquireResult, error) {
			return ApplyAcquire(cur, p, now)
		})
}

// Renew implements ledger.Driver.
func (t Transitions) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "renew", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyRenew(cur, p, now) }))
}

// Complete implements ledger.Driver.
func (t Transitions) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "complete", p.RunID, p.Now,
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return ApplyComplete(cur, p, now)
		})
}

// Release implements ledger.Driver.
func (t Transitions) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "release", p.RunID, p.Now,
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return ApplyRelease(cur, p, now)
		})
}

// Fail implements ledger.Driver.
func (t Transitions) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "fail", p.RunID, p.Now,
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) { return ApplyFail(cur, p, now) })
}

// Rescue implements ledger.Driver.
func (t Transitions) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "rescue", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyRescue(cur, p, now) }))
}

// effectTransition runs rule (which returns the effect to write and the
// answer) in one UpdateEffect.
func effectTransition[T any](ctx context.Context, s Store, op string, f *ledger.Fence, name string, override time.Time,
	rule func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, T, error),
) (T, error) {
	var answer, zero T
	err := s.UpdateEffect(ctx, op, f.RunID, name, override, func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error) {
		next, a, err := rule(run, cur, now)
		answer = a
		return next, err
	})
	if err != nil {
		return zero, err
	}
	return answer, nil
}

// BeginEffect implements ledger.Driver.
func (t Transitions) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	return effectTransition(ctx, t.Store, "begin effect", &p.Fence, p.Name, p.Now,
		func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, *ledger.BeginEffectResult, error) {
			return ApplyBeginEffect(run, cur, p, now)
		})
}

// CompleteEffect implements ledger.Driver.
func (t Transitions) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	return effectTransition(ctx, t.Store, "complete effect", &p.Fence, p.Name, p.Now,
		func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, *ledger.Effect, error) {
			return ApplyCompleteEffect(run, cur, p, now)
		})
}

// Retry implements ledger.Driver.
func (t Transitions) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "retry", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyRetry(cur, p, now) }))
}

// Cancel implements ledger.Driver.
func (t Transitions) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "cancel", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyCancel(cur, p, now) }))
}

// OperatorRelease implements ledger.Driver.
func (t Transitions) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return runTransition(ctx, t.Store, "operator release", p.RunID, p.Now,
		same(func(cur *ledger.Run, now time.Time) (*ledger.Run, error) { return ApplyOperatorRelease(cur, p, now) }))
}

// ResolveEffect implements ledger.Driver: the run and the effect in one
// UpdateRunAndEffect.
func (t Transitions) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	var answer *ledger.Run
	err := t.Store.UpdateRunAndEffect(ctx, "resolve effect", p.RunID, p.Effect, p.Now,
		func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error) {
			next, e, err := ApplyResolveEffect(run, cur, p, now)
			answer = next
			return next, e, err
		})
	if err != nil {
		return nil, err
	}
	return answer, nil
}
