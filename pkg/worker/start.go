package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Start is what StartEffect found or made: the start of an execution outside the worker
// (a Workflows execution, a Cloud Run job execution, a build) that the run then follows.
type Start struct {
	// Key is the effect's key: pass it to the execution as its idempotency key.
	Key string
	// Ref names the execution, as recorded with the effect.
	Ref string
	// Recorded is true when an earlier attempt had recorded the start: fn was not
	// called, and the run resumes following Ref.
	Recorded bool
}

// ErrNotStarted marks a start the API refused before it reached the service (a denied
// permission, an invalid request, a quota denial): nothing was started, so the next
// attempt may start afresh. An answer that does not prove it (an unavailable service, a
// timeout, no answer) is not a refusal: the start may have happened.
var ErrNotStarted = errors.New("worker: the start was refused; nothing started")

// NotStarted marks err as a start the API refused: see ErrNotStarted.
func NotStarted(err error) error { return &notStartedError{err} }

type notStartedError struct{ err error }

func (e *notStartedError) Error() string        { return e.err.Error() }
func (e *notStartedError) Unwrap() error        { return e.err }
func (e *notStartedError) Is(target error) bool { return target == ErrNotStarted }

// maxStartTries bounds the effect names StartEffect walks (one per refused start).
const maxStartTries = 1000

// PendingStart is the start StartEffect asks fn to make: its effect is recorded as begun
// by the caller's attempt.
type PendingStart struct {
	// Name is the effect's name: StartEffect's name, or name/2, name/3, … after starts
	// the API refused. An operator resolves an uncertain start by it.
	Name string
	// Key is the effect's key: pass it to the execution as its idempotency key.
	Key string
	// Prior is the attempt that began this start and did not record its outcome (it
	// died or was shut down between the call and the record, or the call's outcome was
	// unknown), else 0: fn must then look the start up by key before starting again.
	Prior int64
	// BegunAt is when the start was first begun, by the ledger's clock: how long its
	// outcome has been unknown when Prior is set.
	BegunAt time.Time
}

// StartEffect records the start of an external execution as an effect, and the
// execution's name (fn's answer, never empty) with it, so that a later attempt resumes
// following the execution instead of starting another. It calls fn unless an earlier
// attempt recorded the start.
//
// When p.Prior is set, an earlier attempt began this start and its outcome is unknown:
// fn must look the start up by key before starting again, and where it cannot tell
// (the API allows no look-up that proves there is none, or the look-up keeps failing),
// return an *UncertainEffectError (errors.Is ErrEffectUncertain; Permanent to fail the
// run, or a retryable error to try again later) instead of starting: at most once.
// StartEffect adds to such an error how an operator resolves the start once the run has
// failed (ledger ResolveEffect; `runonce runs resolve RUN_ID --effect NAME --done --ref
// EXECUTION` or `--not-done`). When p.Prior is 0 the start is new, or an operator
// resolved it as not done: fn starts without a look-up.
//
// When fn's error is ErrNotStarted (NotStarted), the try is recorded as refused (done,
// with an empty Ref) and the next attempt starts afresh under the next effect name:
// name, name/2, name/3, … Any other error leaves the start begun. fn's outcome is
// recorded even if the job's context ended while fn waited for it (a shutdown), as long
// as the attempt still holds the run: fn should not abandon a start it has sent. A lease
// lost meanwhile returns ledger.ErrLeaseLost and cancels the job's context.
func StartEffect(ctx context.Context, name string, fn func(ctx context.Context, p *PendingStart) (ref string, err error)) (*Start, error) {
	a := attemptFrom(ctx)
	if a == nil {
		return nil, ErrNotInJob
	}
	w := a.w
	for try := 1; try <= maxStartTries; try++ {
		n := ledger.StartTry(name, try)
		res, err := w.cfg.Ledger.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: a.fence, Name: n, Retention: w.cfg.Retention})
		if err != nil {
			return nil, a.ledgerError(ctx, "begin effect "+n, err)
		}
		key := res.Effect.Key
		log := a.log.With(slog.String("effect", n), slog.String("effect_key", key))
		if res.Done && res.Effect.Ref == "" {
			continue // a start the API refused: nothing started; try the next name
		}
		if res.Done {
			w.metrics.effectsSkipped.Add(ctx, 1, w.metrics.reason("done"))
			log.InfoContext(ctx, "start recorded by an earlier attempt: following it", slog.String("effect_ref", res.Effect.Ref), slog.Int64("done_by", res.Effect.Attempt))
			return &Start{Key: key, Ref: res.Effect.Ref, Recorded: true}, nil
		}
		p := &PendingStart{Name: n, Key: key, BegunAt: res.Effect.CreatedAt}
		if res.PreviousAttempt != 0 && res.PreviousAttempt != a.fence.Attempt {
			p.Prior = res.PreviousAttempt
			log.InfoContext(ctx, "an earlier attempt began this start and did not record it", slog.Int64("begun_by", p.Prior))
		}
		ref, ferr := fn(ctx, p)
		if errors.Is(ferr, ErrEffectUncertain) {
			return nil, fmt.Errorf("%w; %s", ferr, resolveHint(a.job.RunID, n))
		}
		if ferr != nil && !errors.Is(ferr, ErrNotStarted) {
			return nil, ferr
		}
		if ferr == nil && ref == "" {
			return nil, Permanent(fmt.Errorf("worker: start %s answered no execution name", n))
		}
		// The outcome is recorded even when the job's context ended meanwhile (a
		// shutdown): the attempt may still hold the run, and the fence decides.
		if _, err := w.cfg.Ledger.CompleteEffect(context.WithoutCancel(ctx), &ledger.CompleteEffectParams{Fence: a.fence, Name: n, Ref: ref, Retention: w.cfg.Retention}); err != nil {
			return nil, a.ledgerError(ctx, "complete effect "+n, err)
		}
		if ferr != nil {
			log.InfoContext(ctx, "start refused: recorded as not started", slog.Any("error", ferr))
			return nil, ferr
		}
		log.InfoContext(ctx, "start recorded", slog.String("effect_ref", ref))
		return &Start{Key: key, Ref: ref}, nil
	}
	return nil, Permanent(fmt.Errorf("worker: %d starts of %s were refused", maxStartTries, name))
}

// ConfirmFence renews the lease of the job's attempt now, confirming with the ledger
// that no other attempt has taken the run over (a lease that ran out while this one was
// paused, an operator's release or cancel): call it immediately before a call that a
// fenced attempt must not make, such as StartEffect's fn before it starts an execution
// the API cannot deduplicate. Until the next renewal an attempt learns of a takeover
// only here. The lease then lasts a full Config.Lease from the renewal, so no other
// attempt can take the run over meanwhile unless an operator acts. It returns an error
// wrapping ledger.ErrLeaseLost, and cancels the job's context, when the attempt was
// fenced out; any other error means the fence could not be confirmed. ErrNotInJob
// outside a job.
func ConfirmFence(ctx context.Context) error {
	a := attemptFrom(ctx)
	if a == nil {
		return ErrNotInJob
	}
	w := a.w
	if _, err := w.cfg.Ledger.Renew(ctx, &ledger.RenewParams{Fence: a.fence, Lease: w.cfg.Lease, Retention: w.cfg.Retention}); err != nil {
		return a.ledgerError(ctx, "confirm the fence", err)
	}
	return nil
}

// resolveHint tells an operator how to resolve the uncertain start recorded under the
// effect name of run runID once the run has failed: both outcomes of `runonce runs
// resolve` (POST /v1/runs/{run_id}:resolve, ledger ResolveEffect).
func resolveHint(runID, effect string) string {
	return fmt.Sprintf("once the run has failed, an operator resolves it: `runonce runs resolve %[1]s --effect %[2]s --done --ref EXECUTION --reason TEXT` "+
		"if the execution exists (EXECUTION is its full name; the run then follows it), or `runonce runs resolve %[1]s --effect %[2]s --not-done --reason TEXT` "+
		"if it does not (the run then starts it, once)", runID, effect)
}

// Logger returns the logger of the job ctx belongs to (with its run, job and attempt),
// or nil outside a job.
func Logger(ctx context.Context) *slog.Logger {
	if a := attemptFrom(ctx); a != nil {
		return a.log
	}
	return nil
}
