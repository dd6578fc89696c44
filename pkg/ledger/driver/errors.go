package driver

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/runonce/runonce/pkg/ledger"
)

// Invalidf returns an error wrapping ledger.ErrInvalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ledger.ErrInvalid, fmt.Sprintf(format, args...))
}

// leaseLost returns ledger.ErrLeaseLost with what the record holds instead.
func leaseLost(f ledger.Fence, cur *ledger.Run) error {
	if cur == nil {
		return fmt.Errorf("%w: run %s is gone", ledger.ErrLeaseLost, f.RunID)
	}
	if cur.Status == ledger.StatusCancelled {
		return fmt.Errorf("%w: %w: run %s was cancelled at attempt %d", ledger.ErrLeaseLost, ledger.ErrCancelled, f.RunID, cur.Attempt)
	}
	return fmt.Errorf("%w: run %s is %s at attempt %d (%s), not attempt %d (%s)",
		ledger.ErrLeaseLost, f.RunID, cur.Status, cur.Attempt, cur.AttemptID, f.Attempt, f.AttemptID)
}

// CheckQuery returns an error naming any query parameter of u not in allowed: an
// Opener calls it so that a misspelt option is refused, not ignored.
func CheckQuery(u *url.URL, allowed ...string) error {
	for k := range u.Query() {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return fmt.Errorf("unknown query parameter %q (this scheme takes none)", k)
			}
			return fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}
