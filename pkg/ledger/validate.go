package ledger

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file holds the checks of every method's parameters. Ledger's methods
// (methods.go) make them before a driver sees the call, so that no backend makes them:
// a driver may take its parameters as sound.

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// firstError returns the first of errs that is not nil.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validateRunID refuses an ID that is not a run ID, naming it.
func validateRunID(id string) error {
	if !ValidRunID(id) {
		return invalidf("run ID %q is not 64 lower-case hex digits", id)
	}
	return nil
}

// validateFence checks the fields a fenced transition needs.
func validateFence(f *Fence) error {
	if err := validateRunID(f.RunID); err != nil {
		return err
	}
	if f.Attempt <= 0 || f.AttemptID == "" {
		return invalidf("run %s: a fenced write needs the attempt number and attempt ID of a worker claim (got %d, %q)", f.RunID, f.Attempt, f.AttemptID)
	}
	return nil
}

// validateClaim checks the parameters of an ingress claim.
func validateClaim(p *ClaimParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if p.AttemptID == "" {
		return invalidf("run %s: the ingress claim needs an attempt ID", p.RunID)
	}
	return nil
}

// validateExpedite checks the parameters of Expedite.
func validateExpedite(p *ExpediteParams) error {
	if !ValidRunID(p.RunID) || p.AttemptID == "" {
		return invalidf("expedite needs a run ID and the ingress claim's attempt ID (got %q, %q)", p.RunID, p.AttemptID)
	}
	return nil
}

// validateAcquire checks the parameters of a worker claim.
func validateAcquire(p *AcquireParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if p.AttemptID == "" {
		return invalidf("run %s: the worker claim needs a new attempt ID", p.RunID)
	}
	return nil
}

// validateEffect checks the parameters of an effect write.
func validateEffect(f *Fence, name string) error {
	if err := validateFence(f); err != nil {
		return err
	}
	if name == "" {
		return invalidf("run %s: an effect needs a name", f.RunID)
	}
	return nil
}

// validateEffectRef checks the ref an effect records.
func validateEffectRef(runID, name, ref string) error {
	if len(ref) > MaxEffectRef {
		return invalidf("effect %q of run %s: ref is %d bytes, the limit is %d", name, runID, len(ref), MaxEffectRef)
	}
	return nil
}

// validateRetryAfter checks a release's delay: not negative, and no longer than the
// retention, so that Deadline and NotBefore stay far inside what a time can hold.
func validateRetryAfter(runID string, d, keep time.Duration) error {
	keep = cmp.Or(keep, DefaultRetention)
	if d < 0 || d > keep {
		return invalidf("run %s: retry after %s is negative or longer than the retention (%s); bound it (worker.Config.MaxRetryAfter)", runID, d, keep)
	}
	return nil
}

// validateProgress checks a run's progress: empty (unchanged), or a JSON value of at
// most MaxProgress bytes.
func validateProgress(runID string, progress []byte) error {
	if len(progress) == 0 {
		return nil
	}
	if len(progress) > MaxProgress {
		return invalidf("run %s: progress is %d bytes, over the %d-byte limit (ledger.MaxProgress)", runID, len(progress), MaxProgress)
	}
	if !json.Valid(progress) {
		return invalidf("run %s: progress is not valid JSON", runID)
	}
	return nil
}

// validateOperator checks an operator action's parameters.
func validateOperator(p *OperatorParams) error {
	if err := validateRunID(p.RunID); err != nil {
		return err
	}
	if strings.TrimSpace(p.Actor) == "" {
		return invalidf("run %s: an operator's action needs the actor", p.RunID)
	}
	if strings.TrimSpace(p.Reason) == "" {
		return invalidf("run %s: an operator's action needs a reason", p.RunID)
	}
	if len(p.Reason) > MaxReason {
		return invalidf("run %s: the reason is %d bytes, the limit is %d", p.RunID, len(p.Reason), MaxReason)
	}
	return nil
}

// validateResolveEffect checks the parameters of an effect's resolution.
func validateResolveEffect(p *ResolveEffectParams) error {
	if err := validateOperator(&p.OperatorParams); err != nil {
		return err
	}
	switch {
	case p.Effect == "":
		return invalidf("run %s: resolving an effect needs the effect's name", p.RunID)
	case p.Done && p.Ref == "":
		return invalidf("run %s: resolving effect %q as done needs its ref, what it made (a start: the execution's full name, which the next attempt follows; without one a start would read as refused and start again)", p.RunID, p.Effect)
	case p.Ref != "" && !p.Done:
		return invalidf("run %s: a ref names what effect %q made: give it only when the effect happened", p.RunID, p.Effect)
	}
	return validateEffectRef(p.RunID, p.Effect, p.Ref)
}

// validateListRunIDs checks ListRunIDs's parameters.
func validateListRunIDs(p *ListRunIDsParams) error {
	if err := ValidRunIDPrefix(p.Prefix); err != nil {
		return err
	}
	if p.Limit < 0 || p.Limit > MaxPageSize {
		return invalidf("limit %d is not between 1 and %d", p.Limit, MaxPageSize)
	}
	return nil
}

// validateList checks a listing's parameters.
func validateList(p *ListParams) error {
	if p.Status != "" && !p.Status.Valid() {
		return invalidf("status %q is not one of queued, running, completed, failed, cancelled", p.Status)
	}
	if p.ByUpdated() && (!p.CreatedAfter.IsZero() || !p.CreatedBefore.IsZero()) {
		return invalidf("filter by creation or by update time, not both")
	}
	if p.PageSize < 0 || p.PageSize > MaxPageSize {
		return invalidf("page size %d is not between 1 and %d", p.PageSize, MaxPageSize)
	}
	if p.Cursor == "" {
		return nil
	}
	if _, err := DecodeCursor(p.Cursor); err != nil {
		return invalidf("cursor %q is not one this ledger made: %v", p.Cursor, err)
	}
	return nil
}

// Position is where a listing stands: the sort time and run ID of the last run of a
// page. Runs come in (time, run ID) descending order.
type Position struct {
	At    time.Time
	RunID string
}

// EncodeCursor returns the opaque cursor of pos (ListResult.Next).
func EncodeCursor(pos Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(pos.At.UnixMicro(), 10) + "." + pos.RunID))
}

// DecodeCursor returns the position of a cursor EncodeCursor made.
func DecodeCursor(c string) (Position, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return Position{}, err
	}
	us, id, ok := strings.Cut(string(b), ".")
	if !ok || !ValidRunID(id) {
		return Position{}, fmt.Errorf("no run ID")
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return Position{}, err
	}
	return Position{At: time.UnixMicro(n).UTC(), RunID: id}, nil
}
