package sqlite

import "context"

// Synchronous reads PRAGMA synchronous on the ledger's connection (2 = FULL, 1 = NORMAL).
func Synchronous(ctx context.Context, l *Ledger) (int, error) {
	var v int
	err := l.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v)
	return v, err
}
