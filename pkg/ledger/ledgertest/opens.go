package ledgertest

import (
	"context"
	"sync"
	"testing"

	"github.com/runonce/runonce/pkg/ledger"
)

// CheckConcurrentOpens opens n ledgers at once on one store that has no tables yet, as
// instances that start together do: open must migrate it (or find it migrated by
// another) and return a ledger that works; each claims a run of its own and closes. It
// fails t for each open or claim that fails. What a backend's migrations record (each
// applied once) is the backend's own test to check afterwards.
func CheckConcurrentOpens(t *testing.T, n int, open func(ctx context.Context) (ledger.Driver, error)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			d, err := open(t.Context())
			if err == nil {
				l := ledger.New(d, nil)
				_, err = l.Claim(t.Context(), &ledger.ClaimParams{Identity: identity(newRunID()), AttemptID: "a"})
				if cerr := l.Close(); err == nil {
					err = cerr
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d of %d at once: %v", i, n, err)
		}
	}
}
