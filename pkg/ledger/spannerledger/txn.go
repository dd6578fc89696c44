package spannerledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
)

// How long a read-write call keeps retrying when its context has no deadline of its own
// (a worker's calls all have one: the lease's end for a renewal, worker.Config's
// LedgerTimeout for the others), and the pauses between its tries when Spanner gives
// none: jittered, doubling from minPause up to maxPause.
const (
	defaultCallTime = 10 * time.Second
	minPause        = 2 * time.Millisecond
	maxPause        = 32 * time.Millisecond
	// rollbackTime bounds the rollback of a transaction given up (best effort: Spanner
	// ends an abandoned transaction by itself).
	rollbackTime = 2 * time.Second
)

// errGaveUp wraps the last error of a call that stopped retrying before its deadline,
// because the next try could not have begun in time.
var errGaveUp = errors.New("no time left before the call's deadline for another try")

// readWrite runs f in a read-write transaction and commits it, trying again while
// Spanner aborts the transaction (or, on the emulator, it vanished: see vanished) until
// one commits, f or the commit answers anything else, or the call's time is up: its
// context's deadline, or defaultCallTime when it has none. A try that could not begin
// before that deadline is not made: a renewal that cannot land before the lease runs out
// is pointless, and its caller does better to know at once. Between tries it waits what
// Spanner asks (its RetryInfo), or a short jittered pause, doubling up to maxPause; the
// client's own ReadWriteTransaction waits up to 32 s, growing by 1.3 per try, which a
// lease of seconds cannot afford. A retry after an abort keeps the aborted
// transaction's priority (ResetForRetry), so that it is not aborted again by younger
// ones. f may run more than once; only the last run's effects count.
//
// On the emulator (serial), each try holds the ledger's one transaction slot, which
// goes to the waiting call whose deadline comes first (gate): the emulator runs one
// read-write transaction at a time, and one client's transactions share one session,
// on which a new transaction closes the older ones still open (an invalid transaction
// ID, or not found). Queued in the process, they take turns instead of closing each
// other until their callers give up. A try another client's transaction aborted pauses
// in the slot, the pause doubling with the process's aborts in a row: the process as a
// whole backs off, rather than each of its calls in turn, whose tries would keep the
// emulator too busy to let the holder commit.
func (l *Ledger) readWrite(ctx context.Context, f func(context.Context, *spanner.ReadWriteTransaction) error) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	var tx *spanner.ReadWriteStmtBasedTransaction
	for n := 0; ; n++ {
		var err error
		tx, err = l.try(ctx, tx, f, n)
		if err == nil {
			return nil
		}
		if !vanished(err) || ctx.Err() != nil || errors.Is(err, errGaveUp) {
			discard(ctx, tx)
			return err
		}
	}
}

// callContext bounds ctx by defaultCallTime when it has no deadline.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultCallTime)
}

// try is the n-th try (from 0) of readWrite: it runs f once in a transaction (prev's
// retry when Spanner aborted prev) and commits it, and when the transaction was aborted
// it pauses before returning (in the slot, on the emulator). It returns the
// transaction, for the next try's ResetForRetry.
func (l *Ledger) try(ctx context.Context, prev *spanner.ReadWriteStmtBasedTransaction, f func(context.Context, *spanner.ReadWriteTransaction) error, n int) (*spanner.ReadWriteStmtBasedTransaction, error) {
	pause := retryPause
	if l.serial != nil {
		if err := l.serial.enter(ctx); err != nil {
			return prev, err
		}
		defer l.serial.leave()
		pause = l.serial.pause
	}
	tx, err := l.attempt(ctx, prev, f)
	if err == nil || !vanished(err) {
		if l.serial != nil && err == nil {
			l.serial.committed()
		}
		return tx, err
	}
	d := pause(err, n)
	if deadline, _ := ctx.Deadline(); !time.Now().Add(d).Before(deadline) {
		return tx, fmt.Errorf("%w after %d tries: %w", errGaveUp, n+1, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return tx, err
}

// attempt runs f once in a transaction, prev's retry when prev was aborted, and commits
// it.
func (l *Ledger) attempt(ctx context.Context, prev *spanner.ReadWriteStmtBasedTransaction, f func(context.Context, *spanner.ReadWriteTransaction) error) (*spanner.ReadWriteStmtBasedTransaction, error) {
	var tx *spanner.ReadWriteStmtBasedTransaction
	if prev != nil {
		// Only a transaction Spanner aborted can be reset; another (one that vanished)
		// is dropped for a new one.
		if next, err := prev.ResetForRetry(ctx); err == nil {
			tx = next
		} else {
			discard(ctx, prev)
		}
	}
	if tx == nil {
		var err error
		tx, err = spanner.NewReadWriteStmtBasedTransactionWithOptions(ctx, l.client,
			spanner.TransactionOptions{BeginTransactionOption: spanner.InlinedBeginTransaction})
		if err != nil {
			return nil, err
		}
	}
	if err := f(ctx, &tx.ReadWriteTransaction); err != nil {
		if !vanished(err) {
			discard(ctx, tx)
			return nil, err
		}
		return tx, err
	}
	_, err := tx.Commit(ctx)
	return tx, err
}

// discard rolls tx back (releasing its locks, if Spanner still holds any, and its
// session handle), for at most rollbackTime whatever is left of ctx; nil is nothing to
// discard.
func discard(ctx context.Context, tx *spanner.ReadWriteStmtBasedTransaction) {
	if tx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTime)
	defer cancel()
	tx.Rollback(ctx)
}

// retryPause is how long to wait before the next try after err, the n-th try (from
// 0): what Spanner asks, or jitter(n).
func retryPause(err error, n int) time.Duration {
	if d, ok := spanner.ExtractRetryDelay(err); ok && d > 0 {
		return d
	}
	return jitter(n)
}

// jitter is a pause after n failures in a row: between half and all of minPause·2ⁿ, at
// most maxPause.
func jitter(n int) time.Duration {
	ceil := min(maxPause, minPause<<min(n, 10))
	return ceil/2 + rand.N(ceil/2+1)
}

// vanished reports whether err says the transaction was aborted, or was gone before it
// committed: nothing of it was committed, and it may be tried again.
func vanished(err error) bool {
	msg := err.Error()
	switch spanner.ErrCode(err) {
	case codes.NotFound:
		return strings.Contains(msg, "Transaction not found")
	case codes.FailedPrecondition:
		// The emulator's words for a transaction a newer one on its session closed.
		return strings.Contains(msg, "Invalid transaction ID") ||
			strings.Contains(msg, "after it has been committed or rolledback") ||
			strings.Contains(msg, "after it has been rolled back") ||
			strings.Contains(msg, "Transaction has already been closed")
	case codes.Aborted:
		return true
	}
	return false
}
