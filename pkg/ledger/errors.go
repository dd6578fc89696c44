package ledger

import (
	"errors"
)

// Sentinel errors. Backends map their native errors to these in one place; callers check
// them with errors.Is.
var (
	// ErrNotFound: no such run or effect.
	ErrNotFound = errors.New("ledger: not found")
	// ErrLeaseLost: the caller's attempt no longer holds the run (another attempt took it
	// over, or it was released, rescued, completed or failed). Nothing was written.
	ErrLeaseLost = errors.New("ledger: lease lost")
	// ErrConflict: the record changed since the caller read it (a rescue raced with a
	// claim). Nothing was written.
	ErrConflict = errors.New("ledger: conflict")
	// ErrContended: the backend gave up on a write because too many writers raced on one
	// record. Nothing was written; retry later. Retryable.
	ErrContended = errors.New("ledger: contended, retry later")
	// ErrUnavailable: the backend could not be reached. The write may or may not have
	// happened; retrying is safe because every operation is idempotent or fenced.
	ErrUnavailable = errors.New("ledger: backend unavailable")
	// ErrTooLarge: the record would exceed what the backend stores in one record (a
	// Firestore document holds at most 1 MiB, payload included). Nothing was written.
	ErrTooLarge = errors.New("ledger: record too large for this backend")
	// ErrInvalid: the parameters are malformed (empty run ID, missing fence, …).
	ErrInvalid = errors.New("ledger: invalid parameters")
	// ErrCancelled: an operator cancelled the run. A holder's fenced write on a cancelled
	// run returns ErrLeaseLost wrapping ErrCancelled, so a worker can tell the two apart.
	ErrCancelled = errors.New("ledger: run cancelled by an operator")
	// ErrWrongStatus: the run's status does not allow the operator's action (retry of a
	// run that is not failed, cancel of a finished run, …). Nothing was written.
	ErrWrongStatus = errors.New("ledger: the run's status does not allow this")
	// ErrAmbiguous: a run ID prefix names more than one run (LookupRunID's
	// *AmbiguousError lists them).
	ErrAmbiguous = errors.New("ledger: the run ID prefix names more than one run")
	// ErrUnsupported: the backend does not implement this operation yet.
	ErrUnsupported = errors.New("ledger: not supported by this backend")
	// ErrNowUnsupported: the backend cannot honour a caller-supplied Now.
	ErrNowUnsupported = errors.New("ledger: this backend cannot replace its clock")
)

// Retryable reports whether err is a transient backend condition worth retrying later
// (contention or unavailability), as opposed to a verdict about the run.
func Retryable(err error) bool {
	return errors.Is(err, ErrContended) || errors.Is(err, ErrUnavailable)
}
