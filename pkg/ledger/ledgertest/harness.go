package ledgertest

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Harness gives the suite fresh ledgers of one backend.
type Harness struct {
	// Open returns a fresh, empty, isolated ledger (its own database, schema, collection
	// prefix or file) and registers its cleanup with tb.Cleanup.
	Open func(tb testing.TB) ledger.Driver
	// SkewedClient returns a second client of the same instance as l whose process clock
	// runs skew() ahead of (negative: behind) the real one at each reading, and registers
	// its cleanup. Decisions must not change: leases are judged by the backend's clock,
	// and a run's history stays in time order when the skew steps. Nil when the backend's
	// clock is the process's by construction (an in-process store); the clock-skew tests
	// then skip.
	SkewedClient func(tb testing.TB, l ledger.Driver, skew func() time.Duration) ledger.Driver
	// SupportsNow is true when the backend honours the params' Now; when false, the suite
	// checks that a Now is refused with ledger.ErrNowUnsupported and uses real time.
	SupportsNow bool
	// LinearizabilityRounds is how many random concurrent histories the linearizability
	// check records and checks; zero means 2. The suite's self-test raises it so that a
	// broken backend is caught whatever the interleaving.
	LinearizabilityRounds int
	// Operations is true when the backend implements the operators' methods (List,
	// ListEffects, Retry, Cancel, OperatorRelease, ResolveEffect) and keeps each run's History; when
	// false, the suite checks that each of them refuses with ledger.ErrUnsupported.
	Operations bool
}
