package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runonce/runonce/pkg/ledger"
)

// MaxResult is the largest result a job may leave, in bytes of JSON: ledger.MaxResult
// (16 KiB).
const MaxResult = ledger.MaxResult

// ErrResultTooLarge is returned by SetResult for a result over MaxResult.
var ErrResultTooLarge = errors.New("worker: result over the limit")

// SetResult sets what the run answers once it completes: v as JSON, at most MaxResult
// bytes. It is stored with the run when the handler returns nil (Complete), shown in the
// run's record (GET /v1/runs/{id}) and replayed, never recomputed, to every duplicate of
// the run: a caller that lost the first answer gets it from a retry. A later call
// replaces an earlier one; a run that fails or is released stores none.
//
// A result over the limit, or one that does not marshal, is refused with an error
// (ErrResultTooLarge) and not kept: the handler decides the run's outcome as usual, and a
// handler that returns nil anyway completes the run without a result (or with the one
// an earlier SetResult kept). Like the payload, a result is never logged.
func SetResult(ctx context.Context, v any) error {
	a := attemptFrom(ctx)
	if a == nil {
		return fmt.Errorf("worker: SetResult called outside a job's context: %w", ErrNotInJob)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: run %s: result does not marshal to JSON: %w", a.job.RunID, err)
	}
	return a.setResult(b)
}

// setResult keeps a JSON result, or refuses it.
func (a *attempt) setResult(b []byte) error {
	if len(b) > MaxResult {
		return fmt.Errorf("%w: run %s: the result is %d bytes of JSON, the limit is %d (worker.MaxResult); not kept", ErrResultTooLarge, a.job.RunID, len(b), MaxResult)
	}
	if err := ledger.ValidateResult(a.job.RunID, b); err != nil {
		return err
	}
	a.result.Store(&b)
	return nil
}

// storedResult is the result Complete stores: nil when none was set.
func (a *attempt) storedResult() []byte {
	if p := a.result.Load(); p != nil {
		return *p
	}
	return nil
}
