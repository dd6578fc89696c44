package firestoreledger

import (
	"context"

	"github.com/runonce/runonce/pkg/ledger"
)

// Retry implements ledger.Ledger: refused (driver.NoOperations) until this backend
// keeps a run's history.
func (l *Ledger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.NoOperations.Retry(ctx, p)
}

// Cancel implements ledger.Ledger: refused, as Retry.
func (l *Ledger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.NoOperations.Cancel(ctx, p)
}

// OperatorRelease implements ledger.Ledger: refused, as Retry.
func (l *Ledger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.NoOperations.OperatorRelease(ctx, p)
}
