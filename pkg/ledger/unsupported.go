package ledger

import (
	"context"
	"fmt"
)

// NoOperations implements the operators' methods of Ledger (List, ListEffects, Retry,
// Cancel, OperatorRelease) by refusing them with ErrUnsupported. A backend that does
// not implement them yet embeds it; the conformance suite checks the refusal
// (ledgertest.Harness.Operations false).
type NoOperations struct {
	// Backend names the backend in the errors.
	Backend string
}

func (n NoOperations) refuse(op string) error {
	return fmt.Errorf("%w: %s on %s (listing runs and the operators' actions are served by the memory, sqlite, postgres, firestore and spanner ledgers so far)", ErrUnsupported, op, n.Backend)
}

// List implements Ledger.
func (n NoOperations) List(context.Context, *ListParams) (*ListResult, error) {
	return nil, n.refuse("list runs")
}

// ListEffects implements Ledger.
func (n NoOperations) ListEffects(context.Context, *ListEffectsParams) ([]*Effect, error) {
	return nil, n.refuse("list effects")
}

// Retry implements Ledger.
func (n NoOperations) Retry(context.Context, *OperatorParams) (*Run, error) {
	return nil, n.refuse("retry")
}

// Cancel implements Ledger.
func (n NoOperations) Cancel(context.Context, *OperatorParams) (*Run, error) {
	return nil, n.refuse("cancel")
}

// OperatorRelease implements Ledger.
func (n NoOperations) OperatorRelease(context.Context, *OperatorParams) (*Run, error) {
	return nil, n.refuse("release")
}
