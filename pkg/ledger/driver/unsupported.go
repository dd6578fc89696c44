package driver

import (
	"context"
	"fmt"

	"github.com/runonce/runonce/pkg/ledger"
)

// NoOperations implements the operators' methods of ledger.Driver (List, ListRunIDs,
// ListEffects, Retry, Cancel, OperatorRelease, ResolveEffect) by refusing them with
// ledger.ErrUnsupported. A backend that does not implement them yet embeds it; the
// conformance suite checks the refusal (ledgertest.Harness.Operations false).
type NoOperations struct {
	// Backend names the backend in the errors.
	Backend string
}

func (n NoOperations) refuse(op string) error {
	return fmt.Errorf("%w: %s on %s (this backend does not serve listing runs and the operators' actions yet)", ledger.ErrUnsupported, op, n.Backend)
}

// List implements ledger.Driver.
func (n NoOperations) List(context.Context, *ledger.ListParams) (*ledger.ListResult, error) {
	return nil, n.refuse("list runs")
}

// ListRunIDs implements ledger.Driver.
func (n NoOperations) ListRunIDs(context.Context, *ledger.ListRunIDsParams) ([]string, error) {
	return nil, n.refuse("list run IDs")
}

// ListEffects implements ledger.Driver.
func (n NoOperations) ListEffects(context.Context, *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	return nil, n.refuse("list effects")
}

// Retry implements ledger.Driver.
func (n NoOperations) Retry(context.Context, *ledger.OperatorParams) (*ledger.Run, error) {
	return nil, n.refuse("retry")
}

// Cancel implements ledger.Driver.
func (n NoOperations) Cancel(context.Context, *ledger.OperatorParams) (*ledger.Run, error) {
	return nil, n.refuse("cancel")
}

// OperatorRelease implements ledger.Driver.
func (n NoOperations) OperatorRelease(context.Context, *ledger.OperatorParams) (*ledger.Run, error) {
	return nil, n.refuse("release")
}

// ResolveEffect implements ledger.Driver.
func (n NoOperations) ResolveEffect(context.Context, *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return nil, n.refuse("resolve effect")
}
