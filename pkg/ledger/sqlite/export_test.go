package sqlite

import (
	"context"
	"sync"

	"github.com/runonce/runonce/pkg/ledger"
)

// Synchronous reads PRAGMA synchronous on the ledger's connection (2 = FULL, 1 = NORMAL).
func Synchronous(ctx context.Context, l *Ledger) (int, error) {
	var v int
	err := l.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v)
	return v, err
}

// ClaimLocked is Claim's write path alone (the whole of Claim before duplicates became a
// read outside the write lock), for the benchmark that compares the two.
func ClaimLocked(ctx context.Context, l *Ledger, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	return l.claimLocked(ctx, p)
}

// LockWrites takes the ledger's write lock and returns its release (idempotent).
func LockWrites(l *Ledger) (unlock func()) {
	l.wmu.Lock()
	var once sync.Once
	return func() { once.Do(l.wmu.Unlock) }
}

// Commits returns how many write transactions the ledger has run.
func Commits(l *Ledger) int64 { return l.commits.Load() }

// Reads returns how many reads the ledger has made outside a write transaction.
func Reads(l *Ledger) int64 { return l.reads.Load() }

// Queued returns how many writes wait for the write lock.
func Queued(l *Ledger) int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return len(l.queued)
}
