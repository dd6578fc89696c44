package ledger

import (
	"context"
	"errors"
	"fmt"
)

// StartTry is the effect name of the try-th start recorded under name (see
// worker.StartEffect): name itself, then name/2, name/3, … — a start the API refused is
// recorded done with an empty Ref, and the next try takes the next name.
func StartTry(name string, try int) string {
	if try <= 1 {
		return name
	}
	return fmt.Sprintf("%s/%d", name, try)
}

// maxRefLookups bounds the effects FindRef reads.
const maxRefLookups = 16

// FindRef returns the Ref of the run's start recorded under name: the first effect of
// name, name/2, … with a Ref, or "" when there is none. It stops at the first absent
// effect, and reads at most 16.
func FindRef(ctx context.Context, l *Ledger, runID, name string) (string, error) {
	for try := 1; try <= maxRefLookups; try++ {
		e, err := l.GetEffect(ctx, &GetEffectParams{RunID: runID, Name: StartTry(name, try)})
		if errors.Is(err, ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if e.Ref != "" {
			return e.Ref, nil
		}
		if e.Status != EffectDone {
			return "", nil
		}
	}
	return "", nil
}
