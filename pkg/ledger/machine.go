package ledger

import (
	"cmp"
	"fmt"
	"time"
)

// This file is the run state machine as pure functions over records. Backends that read
// a record and write it back in one transaction (memory, sqlite, firestore) apply these,
// so the rules live in one place; a backend that expresses them in its query language
// (postgres) must agree with them, and the conformance suite checks that it does.
//
// Each Apply function takes the current record (nil when absent) and the backend's
// "now", and returns the record to write (nil when nothing is to be written) and the
// answer. None of them reads a clock.

// Truncate normalises a time to what every backend stores exactly: UTC, microseconds.
func Truncate(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func retention(d time.Duration) time.Duration { return cmp.Or(d, DefaultRetention) }

// ValidateIdentity checks the fields a claim needs.
func ValidateIdentity(id *Identity) error {
	if !ValidRunID(id.RunID) {
		return Invalidf("run ID %q is not 64 lower-case hex digits", id.RunID)
	}
	return nil
}

// ValidateFence checks the fields a fenced transition needs.
func ValidateFence(f *Fence) error {
	if !ValidRunID(f.RunID) {
		return Invalidf("run ID %q is not 64 lower-case hex digits", f.RunID)
	}
	if f.Attempt <= 0 || f.AttemptID == "" {
		return Invalidf("run %s: a fenced write needs the attempt number and attempt ID of a worker claim (got %d, %q)", f.RunID, f.Attempt, f.AttemptID)
	}
	return nil
}

// ValidateClaim checks the parameters of an ingress claim.
func ValidateClaim(p *ClaimParams) error {
	if err := ValidateIdentity(&p.Identity); err != nil {
		return err
	}
	if p.AttemptID == "" {
		return Invalidf("run %s: the ingress claim needs an attempt ID", p.RunID)
	}
	return nil
}

// ValidateAcquire checks the parameters of a worker claim.
func ValidateAcquire(p *AcquireParams) error {
	if err := ValidateIdentity(&p.Identity); err != nil {
		return err
	}
	if p.AttemptID == "" {
		return Invalidf("run %s: the worker claim needs a new attempt ID", p.RunID)
	}
	return nil
}

// ValidateEffect checks the parameters of an effect write.
func ValidateEffect(f *Fence, name string) error {
	if err := ValidateFence(f); err != nil {
		return err
	}
	if name == "" {
		return Invalidf("run %s: an effect needs a name", f.RunID)
	}
	return nil
}

// ValidateRescue checks the parameters of a rescue.
func ValidateRescue(p *RescueParams) error {
	if !ValidRunID(p.RunID) {
		return Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
	return nil
}

// Holds reports whether r is running under fence f.
func Holds(r *Run, f *Fence) bool {
	return r != nil && r.Status == StatusRunning && r.Attempt == f.Attempt && r.AttemptID == f.AttemptID
}

func sameAttempt(r *Run, f *Fence) bool {
	return r != nil && r.Attempt == f.Attempt && r.AttemptID == f.AttemptID
}

// touch stamps a written run: UpdatedAt is now, and ExpireAt is the retention after the
// last moment anything is due on the run (now, its deadline, its not-before), so that
// a sweeper can never delete a run before its retry or its rescue is due, nor sooner
// than a retention after either.
func touch(r *Run, now time.Time, keep time.Duration) {
	r.UpdatedAt = now
	r.ExpireAt = ExpiryOf(r, now, keep)
}

// ExpiryOf is the ExpireAt a run written at now with retention keep must carry: the
// retention after the latest of now, its Deadline and its NotBefore. Every backend keeps
// ExpireAt ≥ max(Deadline, NotBefore) + retention on every write (the conformance suite
// checks it after every transition).
func ExpiryOf(r *Run, now time.Time, keep time.Duration) time.Time {
	last := now
	for _, t := range []time.Time{r.Deadline, r.NotBefore} {
		if t.After(last) {
			last = t
		}
	}
	return Truncate(last.Add(retention(keep)))
}

// ValidateRetryAfter checks a release's delay: not negative, and no longer than the
// retention, so that Deadline and NotBefore stay far inside what a time can hold.
func ValidateRetryAfter(runID string, d, keep time.Duration) error {
	if d < 0 || d > retention(keep) {
		return Invalidf("run %s: retry after %s is negative or longer than the retention (%s); bound it (worker.Config.MaxRetryAfter)", runID, d, retention(keep))
	}
	return nil
}

// ApplyClaim is the ingress claim.
func ApplyClaim(cur *Run, p *ClaimParams, now time.Time) (*Run, *ClaimResult, error) {
	now = Truncate(now)
	if err := ValidateClaim(p); err != nil {
		return nil, nil, err
	}
	if cur != nil {
		return nil, &ClaimResult{Run: cur, PayloadMismatch: cur.PayloadHash != p.PayloadHash}, nil
	}
	r := &Run{
		ID: p.RunID, Namespace: p.Namespace, Job: p.Job, Key: p.Key,
		ScheduleTime: Truncate(p.ScheduleTime), PayloadHash: p.PayloadHash, Payload: p.Payload,
		Status: StatusQueued, AttemptID: p.AttemptID,
		Deadline:  Truncate(now.Add(cmp.Or(p.PickupTimeout, DefaultPickupTimeout))),
		CreatedAt: now,
	}
	touch(r, now, p.Retention)
	return r, &ClaimResult{Run: r, Created: true}, nil
}

// ValidateExpedite checks the parameters of Expedite.
func ValidateExpedite(p *ExpediteParams) error {
	if !ValidRunID(p.RunID) || p.AttemptID == "" {
		return Invalidf("expedite needs a run ID and the ingress claim's attempt ID (got %q, %q)", p.RunID, p.AttemptID)
	}
	return nil
}

// ApplyExpedite makes an untouched ingress claim due now (see Ledger.Expedite).
func ApplyExpedite(cur *Run, p *ExpediteParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := ValidateExpedite(p); err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, fmt.Errorf("%w: run %s", ErrNotFound, p.RunID)
	}
	if cur.Status != StatusQueued || cur.Attempt != 0 || cur.AttemptID != p.AttemptID {
		return nil, leaseLost(Fence{RunID: p.RunID, AttemptID: p.AttemptID}, cur)
	}
	r := *cur
	r.Deadline = now
	touch(&r, now, p.Retention)
	return &r, nil
}

// ApplyAcquire is the worker claim.
func ApplyAcquire(cur *Run, p *AcquireParams, now time.Time) (*Run, *AcquireResult, error) {
	now = Truncate(now)
	if err := ValidateAcquire(p); err != nil {
		return nil, nil, err
	}
	var r Run
	switch {
	case cur == nil && p.MustExist:
		return nil, nil, fmt.Errorf("%w: run %s (the claim may not create it)", ErrNotFound, p.RunID)
	case cur != nil && cur.PayloadHash != p.PayloadHash:
		return nil, &AcquireResult{Outcome: PayloadMismatch, Run: cur}, nil
	case cur == nil:
		r = Run{
			ID: p.RunID, Namespace: p.Namespace, Job: p.Job, Key: p.Key,
			ScheduleTime: Truncate(p.ScheduleTime), PayloadHash: p.PayloadHash, Payload: p.Payload,
			CreatedAt: now,
		}
	case cur.Status.Terminal():
		return nil, &AcquireResult{Outcome: Terminal, Run: cur}, nil
	case cur.Status == StatusQueued && cur.NotBefore.After(now):
		return nil, &AcquireResult{Outcome: Held, Run: cur, Until: cur.NotBefore}, nil
	case cur.Status == StatusRunning && !cur.Deadline.Before(now):
		return nil, &AcquireResult{Outcome: Held, Run: cur, Until: cur.Deadline}, nil
	case cur.Status == StatusRunning: // the lease expired: take it over
		r = *cur
		r.AttemptsMade++
		r.LastError = fmt.Sprintf("attempt %d lost its lease at %s", cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
	default:
		r = *cur
	}
	r.Status = StatusRunning
	r.Attempt++
	r.AttemptID = p.AttemptID
	r.NotBefore = time.Time{}
	r.Deadline = Truncate(now.Add(cmp.Or(p.Lease, DefaultLease)))
	touch(&r, now, p.Retention)
	return &r, &AcquireResult{Outcome: Acquired, Run: &r}, nil
}

// ApplyRenew extends the caller's lease.
func ApplyRenew(cur *Run, p *RenewParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := ValidateFence(&p.Fence); err != nil {
		return nil, err
	}
	if err := ValidateProgress(p.RunID, p.Progress); err != nil {
		return nil, err
	}
	if !Holds(cur, &p.Fence) {
		return nil, leaseLost(p.Fence, cur)
	}
	r := *cur
	withProgress(&r, p.Progress)
	r.Deadline = Truncate(now.Add(cmp.Or(p.Lease, DefaultLease)))
	r.UpdatedAt = now
	if exp := ExpiryOf(&r, now, p.Retention); r.ExpireAt.Before(exp) {
		r.ExpireAt = exp
	}
	return &r, nil
}

// ApplyComplete completes the caller's run. A repeat by the same attempt writes nothing.
func ApplyComplete(cur *Run, p *CompleteParams, now time.Time) (*Run, *Run, error) {
	now = Truncate(now)
	if err := ValidateResult(p.RunID, p.Result); err != nil {
		return nil, nil, err
	}
	if err := ValidateProgress(p.RunID, p.Progress); err != nil {
		return nil, nil, err
	}
	next, answer, err := finish(cur, &p.Fence, StatusCompleted, "", p.Retention, now)
	if next != nil {
		next.Result = p.Result
		withProgress(next, p.Progress)
	}
	return next, answer, err
}

// ApplyFail fails the caller's run for good. A repeat by the same attempt writes nothing.
func ApplyFail(cur *Run, p *FailParams, now time.Time) (*Run, *Run, error) {
	now = Truncate(now)
	if err := ValidateProgress(p.RunID, p.Progress); err != nil {
		return nil, nil, err
	}
	next, answer, err := finish(cur, &p.Fence, StatusFailed, p.Error, p.Retention, now)
	if next != nil {
		withProgress(next, p.Progress)
	}
	return next, answer, err
}

// finish returns (record to write or nil, answer, error).
func finish(cur *Run, f *Fence, to Status, errText string, keep time.Duration, now time.Time) (*Run, *Run, error) {
	if err := ValidateFence(f); err != nil {
		return nil, nil, err
	}
	if cur != nil && cur.Status == to && sameAttempt(cur, f) {
		return nil, cur, nil
	}
	if !Holds(cur, f) {
		return nil, nil, leaseLost(*f, cur)
	}
	r := *cur
	r.Status = to
	r.AttemptsMade++
	if errText != "" {
		r.LastError = errText
	}
	r.Deadline = time.Time{}
	r.NotBefore = time.Time{}
	r.CompletedAt = now
	touch(&r, now, keep)
	return &r, &r, nil
}

// ApplyRelease returns the caller's run to queued. A repeat by the same attempt writes
// nothing.
func ApplyRelease(cur *Run, p *ReleaseParams, now time.Time) (*Run, *Run, error) {
	now = Truncate(now)
	if err := ValidateFence(&p.Fence); err != nil {
		return nil, nil, err
	}
	if err := ValidateRetryAfter(p.RunID, p.RetryAfter, p.Retention); err != nil {
		return nil, nil, err
	}
	if err := ValidateProgress(p.RunID, p.Progress); err != nil {
		return nil, nil, err
	}
	if cur != nil && cur.Status == StatusQueued && sameAttempt(cur, &p.Fence) {
		return nil, cur, nil
	}
	if !Holds(cur, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, cur)
	}
	r := *cur
	withProgress(&r, p.Progress)
	r.Status = StatusQueued
	r.AttemptsMade++
	r.LastError = p.Error
	r.NotBefore = time.Time{}
	if p.RetryAfter > 0 {
		r.NotBefore = Truncate(now.Add(p.RetryAfter))
	}
	r.Deadline = Truncate(now.Add(p.RetryAfter + cmp.Or(p.PickupTimeout, DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, &r, nil
}

// ApplyRescue returns a listed run to queued with a fresh pickup deadline.
func ApplyRescue(cur *Run, p *RescueParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := ValidateRescue(p); err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, fmt.Errorf("%w: run %s", ErrNotFound, p.RunID)
	}
	if cur.Status != p.Status || cur.Attempt != p.Attempt || !cur.Deadline.Equal(Truncate(p.Deadline)) {
		return nil, fmt.Errorf("%w: run %s is %s at attempt %d with deadline %s since it was listed",
			ErrConflict, p.RunID, cur.Status, cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
	}
	if cur.Status.Terminal() || !cur.Deadline.Before(now) {
		return nil, fmt.Errorf("%w: run %s is %s and not past its deadline", ErrConflict, p.RunID, cur.Status)
	}
	r := *cur
	if r.Status == StatusRunning {
		r.AttemptsMade++
		r.LastError = fmt.Sprintf("attempt %d lost its lease at %s", cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
		r.AttemptID = ""
		r.Status = StatusQueued
	}
	r.NotBefore = time.Time{}
	r.Deadline = Truncate(now.Add(cmp.Or(p.PickupTimeout, DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, nil
}

// NeedsRescue reports whether r is queued past its pickup deadline or running past its
// lease at now.
func NeedsRescue(r *Run, now time.Time) bool {
	return (r.Status == StatusQueued || r.Status == StatusRunning) && r.Deadline.Before(now)
}

// ApplyBeginEffect records an effect as pending for the caller's attempt.
func ApplyBeginEffect(run *Run, cur *Effect, p *BeginEffectParams, now time.Time) (*Effect, *BeginEffectResult, error) {
	now = Truncate(now)
	if err := ValidateEffect(&p.Fence, p.Name); err != nil {
		return nil, nil, err
	}
	if !Holds(run, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, run)
	}
	if cur != nil && cur.Status == EffectDone {
		return nil, &BeginEffectResult{Effect: cur, Done: true}, nil
	}
	e := &Effect{Key: EffectKey(p.RunID, p.Name), RunID: p.RunID, Name: p.Name, CreatedAt: now}
	var prev int64
	if cur != nil {
		*e = *cur
		prev = cur.Attempt
	}
	e.Status = EffectPending
	e.Attempt = p.Attempt
	e.UpdatedAt = now
	e.ExpireAt = Truncate(now.Add(retention(p.Retention)))
	return e, &BeginEffectResult{Effect: e, PreviousAttempt: prev}, nil
}

// ApplyCompleteEffect marks an effect the caller's attempt began as done. A repeat by the
// same attempt writes nothing.
func ApplyCompleteEffect(run *Run, cur *Effect, p *CompleteEffectParams, now time.Time) (*Effect, *Effect, error) {
	now = Truncate(now)
	if err := ValidateEffect(&p.Fence, p.Name); err != nil {
		return nil, nil, err
	}
	if !Holds(run, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, run)
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("%w: effect %q of run %s was never begun", ErrNotFound, p.Name, p.RunID)
	}
	if cur.Attempt != p.Attempt {
		return nil, nil, Invalidf("effect %q of run %s was begun by attempt %d, not %d: begin it first", p.Name, p.RunID, cur.Attempt, p.Attempt)
	}
	if len(p.Ref) > MaxEffectRef {
		return nil, nil, Invalidf("effect %q of run %s: ref is %d bytes, the limit is %d", p.Name, p.RunID, len(p.Ref), MaxEffectRef)
	}
	if cur.Status == EffectDone {
		return nil, cur, nil
	}
	e := *cur
	e.Status = EffectDone
	e.Ref = p.Ref
	e.DoneAt = now
	e.UpdatedAt = now
	e.ExpireAt = Truncate(now.Add(retention(p.Retention)))
	return &e, &e, nil
}
