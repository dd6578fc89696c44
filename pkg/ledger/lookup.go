package ledger

import (
	"context"
	"fmt"
	"strings"
)

// MaxCandidates is how many runs an AmbiguousError lists.
const MaxCandidates = 5

// AmbiguousError is a run ID prefix that names more than one run. It wraps ErrAmbiguous.
type AmbiguousError struct {
	Prefix string
	// Candidates are the first MaxCandidates IDs that start with Prefix, ascending.
	Candidates []string
	// More is true when other runs start with Prefix too.
	More bool
}

func (e *AmbiguousError) Error() string {
	more := ""
	if e.More {
		more = ", …"
	}
	return fmt.Sprintf("run ID prefix %s names more than one run (%s%s): give more of its digits", e.Prefix, strings.Join(e.Candidates, ", "), more)
}

// Unwrap makes errors.Is(err, ErrAmbiguous) true.
func (e *AmbiguousError) Unwrap() error { return ErrAmbiguous }

// LookupRunID returns the ID of the run that idOrPrefix names: a full run ID is returned
// as it is (without a call: Get says whether it exists), a prefix (ValidRunIDPrefix) is
// looked up with ListRunIDs. A prefix no run starts with is ErrNotFound, one that more
// than one run starts with an *AmbiguousError; anything else ErrInvalid.
func LookupRunID(ctx context.Context, l *Ledger, idOrPrefix string) (string, error) {
	if ValidRunID(idOrPrefix) {
		return idOrPrefix, nil
	}
	if err := ValidRunIDPrefix(idOrPrefix); err != nil {
		return "", err
	}
	ids, err := l.ListRunIDs(ctx, &ListRunIDsParams{Prefix: idOrPrefix, Limit: MaxCandidates + 1})
	switch {
	case err != nil:
		return "", err
	case len(ids) == 0:
		return "", fmt.Errorf("%w: no run ID starts with %s", ErrNotFound, idOrPrefix)
	case len(ids) > 1:
		e := &AmbiguousError{Prefix: idOrPrefix, Candidates: ids[:min(len(ids), MaxCandidates)], More: len(ids) > MaxCandidates}
		return "", e
	}
	return ids[0], nil
}
