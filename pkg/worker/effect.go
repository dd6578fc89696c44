package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/runonce/runonce/pkg/ledger"
)

// attempt is what a job's context carries: the run it works on and the fence of its
// writes.
type attempt struct {
	w      *Worker
	job    *Job
	fence  ledger.Fence
	cancel context.CancelCauseFunc
	log    *slog.Logger
	// result is what SetResult kept for Complete (result.go).
	result atomic.Pointer[[]byte]
	// batches are the attempt's batches, whose counts are its progress (batch.go).
	batchMu sync.Mutex
	batches []*batch
}

type attemptKey struct{}

func withAttempt(ctx context.Context, a *attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// JobFromContext returns the job a handler's context belongs to.
func JobFromContext(ctx context.Context) (*Job, bool) {
	if a := attemptFrom(ctx); a != nil {
		return a.job, true
	}
	return nil, false
}

// RunEffect is the effect name of the run as a whole: IdempotencyKey is its key, and an
// HTTP target's call is recorded under it.
const RunEffect = "run"

// IdempotencyKey returns the key of the run as a whole, stable across every attempt:
// EffectKey of RunEffect. Pass it downstream when the job has one effect; give each
// effect its own name with Effect when it has several. Empty outside a job.
func IdempotencyKey(ctx context.Context) string {
	a := attemptFrom(ctx)
	if a == nil {
		return ""
	}
	return ledger.EffectKey(a.job.RunID, RunEffect)
}

// ErrNotInJob is returned by Effect called outside a job's context.
var ErrNotInJob = errors.New("worker: effect called outside a job's context")

// ErrEffectUncertain is returned by AtMostOnce for an effect an earlier attempt began
// and did not mark done: it may or may not have happened, and it is not done again.
var ErrEffectUncertain = errors.New("worker: an earlier attempt began this effect and did not finish it; skipped")

// UncertainEffectError carries the facts of an effect AtMostOnce skipped.
type UncertainEffectError struct {
	Name string
	Key  string
	// Attempt is the attempt that began the effect.
	Attempt int64
}

func (e *UncertainEffectError) Error() string {
	return fmt.Sprintf("worker: effect %q (key %s) was begun by attempt %d and not finished: it may or may not have happened; skipped (at most once)", e.Name, e.Key, e.Attempt)
}

// Is makes errors.Is(err, ErrEffectUncertain) true.
func (e *UncertainEffectError) Is(target error) bool { return target == ErrEffectUncertain }

// Effect runs one side effect of the job at least once and, with a downstream that
// honours Idempotency-Key, once: it records the effect's key in the ledger before fn
// runs, skips fn (returning nil) when an earlier attempt did it, hands fn the key to pass
// downstream as Idempotency-Key, and marks the effect done after fn succeeds. If fn
// fails, or the attempt dies during it, the next attempt calls fn again with the same
// key. A lease lost meanwhile returns ledger.ErrLeaseLost, records nothing and cancels
// the job's context.
func Effect(ctx context.Context, name string, fn func(ctx context.Context, key string) error) error {
	return effect(ctx, name, false, fn)
}

// AtMostOnce runs one side effect of the job at most once, for downstreams that take no
// idempotency key: like Effect, except that an effect an earlier attempt began and did
// not mark done is not done again — AtMostOnce returns an *UncertainEffectError
// (errors.Is ErrEffectUncertain) and the job decides whether to go on, fail
// (Permanent) or alert. The effect stays uncertain through a retry of the run, until
// an operator who has found out says whether it happened (ledger.Ledger.ResolveEffect,
// `runonce runs resolve`); if it did not, the next attempt does it. Prefer Effect with
// a key whenever the downstream takes one: AtMostOnce trades a possible duplicate for a
// possible omission.
func AtMostOnce(ctx context.Context, name string, fn func(ctx context.Context, key string) error) error {
	return effect(ctx, name, true, fn)
}

func effect(ctx context.Context, name string, atMostOnce bool, fn func(context.Context, string) error) error {
	a := attemptFrom(ctx)
	if a == nil {
		return ErrNotInJob
	}
	w := a.w
	res, err := w.cfg.Ledger.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: a.fence, Name: name, Retention: w.cfg.Retention})
	if err != nil {
		return a.ledgerError(ctx, "begin effect "+name, err)
	}
	key := res.Effect.Key
	log := a.log.With(slog.String("effect", name), slog.String("effect_key", key))
	if res.Done {
		w.metrics.effectsSkipped.Add(ctx, 1, w.metrics.reason("done"))
		log.InfoContext(ctx, "effect skipped: done by an earlier attempt", slog.Int64("done_by", res.Effect.Attempt))
		return nil
	}
	if res.PreviousAttempt != 0 && res.PreviousAttempt != a.fence.Attempt {
		if atMostOnce {
			w.metrics.effectsSkipped.Add(ctx, 1, w.metrics.reason("uncertain"))
			log.WarnContext(ctx, "effect skipped: an earlier attempt began it and did not finish (at most once)", slog.Int64("begun_by", res.PreviousAttempt))
			return &UncertainEffectError{Name: name, Key: key, Attempt: res.PreviousAttempt}
		}
		log.InfoContext(ctx, "effect retried with the same key: an earlier attempt began it and did not finish", slog.Int64("begun_by", res.PreviousAttempt))
	}
	if err := fn(ctx, key); err != nil {
		return err
	}
	if _, err := w.cfg.Ledger.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: a.fence, Name: name, Retention: w.cfg.Retention}); err != nil {
		return a.ledgerError(ctx, "complete effect "+name, err)
	}
	return nil
}

// ledgerError turns a failed fenced write into the job's error; a lost lease cancels the
// job's context.
func (a *attempt) ledgerError(ctx context.Context, what string, err error) error {
	if errors.Is(err, ledger.ErrLeaseLost) {
		a.w.metrics.fencedRefused.Add(ctx, 1)
		a.cancel(err)
	}
	return fmt.Errorf("worker: %s: %w", what, err)
}
