package driver

import (
	"cmp"
	"fmt"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// This file is the run state machine as pure functions over records. Backends that read
// a record and write it back in one transaction (memory, sqlite, firestore) apply these,
// so the rules live in one place; a backend that expresses them in its query language
// (postgres) must agree with them, and the conformance suite checks that it does.
//
// Each Apply function takes the current record (nil when absent) and the backend's
// "now", and returns the record to write (nil when nothing is to be written) and the
// answer. None of them reads a clock.

// Micros normalises a time to what every backend stores exactly: UTC, microseconds.
func Micros(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func retention(d time.Duration) time.Duration { return cmp.Or(d, ledger.DefaultRetention) }

// Holds reports whether r is running under fence f.
func Holds(r *ledger.Run, f *ledger.Fence) bool {
	return r != nil && r.Status == ledger.StatusRunning && r.Attempt == f.Attempt && r.AttemptID == f.AttemptID
}

func sameAttempt(r *ledger.Run, f *ledger.Fence) bool {
	return r != nil && r.Attempt == f.Attempt && r.AttemptID == f.AttemptID
}

// touch stamps a written run: UpdatedAt is now, and ExpireAt is the retention after the
// last moment anything is due on the run (now, its deadline, its not-before), so that
// a sweeper can never delete a run before its retry or its rescue is due, nor sooner
// than a retention after either.
func touch(r *ledger.Run, now time.Time, keep time.Duration) {
	r.UpdatedAt = now
	r.ExpireAt = ExpiryOf(r, now, keep)
}

// ExpiryOf is the ExpireAt a run written at now with retention keep must carry: the
// retention after the latest of now, its Deadline and its NotBefore. Every backend keeps
// ExpireAt ≥ max(Deadline, NotBefore) + retention on every write (the conformance suite
// checks it after every transition).
func ExpiryOf(r *ledger.Run, now time.Time, keep time.Duration) time.Time {
	last := now
	for _, t := range []time.Time{r.Deadline, r.NotBefore} {
		if t.After(last) {
			last = t
		}
	}
	return Micros(last.Add(retention(keep)))
}

// ApplyClaim is the ingress claim.
func ApplyClaim(cur *ledger.Run, p *ledger.ClaimParams, now time.Time) (next *ledger.Run, res *ledger.ClaimResult, err error) {
	defer func() { record(next, cur, OpClaim, now, Note{}) }()
	now = Micros(now)
	if cur != nil {
		return nil, &ledger.ClaimResult{Run: cur, PayloadMismatch: cur.PayloadHash != p.PayloadHash}, nil
	}
	r := &ledger.Run{
		ID: p.RunID, Namespace: p.Namespace, Job: p.Job, Key: p.Key,
		ScheduleTime: Micros(p.ScheduleTime), PayloadHash: p.PayloadHash, Payload: p.Payload,
		Status: ledger.StatusQueued, AttemptID: p.AttemptID,
		Deadline:  Micros(now.Add(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout))),
		CreatedAt: now,
	}
	touch(r, now, p.Retention)
	return r, &ledger.ClaimResult{Run: r, Created: true}, nil
}

// ApplyExpedite makes an untouched ingress claim due now (see Ledger.Expedite).
func ApplyExpedite(cur *ledger.Run, p *ledger.ExpediteParams, now time.Time) (*ledger.Run, error) {
	now = Micros(now)
	if cur == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	if cur.Status != ledger.StatusQueued || cur.Attempt != 0 || cur.AttemptID != p.AttemptID {
		return nil, leaseLost(ledger.Fence{RunID: p.RunID, AttemptID: p.AttemptID}, cur)
	}
	r := *cur
	r.Deadline = now
	touch(&r, now, p.Retention)
	return &r, nil
}

// ApplyAcquire is the worker claim.
func ApplyAcquire(cur *ledger.Run, p *ledger.AcquireParams, now time.Time) (next *ledger.Run, res *ledger.AcquireResult, err error) {
	defer func() { record(next, cur, OpAcquire, now, Note{Worker: p.Worker}) }()
	now = Micros(now)
	var r ledger.Run
	switch {
	case cur == nil && p.MustExist:
		return nil, nil, fmt.Errorf("%w: run %s (the claim may not create it)", ledger.ErrNotFound, p.RunID)
	case cur != nil && cur.PayloadHash != p.PayloadHash:
		return nil, &ledger.AcquireResult{Outcome: ledger.OutcomePayloadMismatch, Run: cur}, nil
	case cur == nil:
		r = ledger.Run{
			ID: p.RunID, Namespace: p.Namespace, Job: p.Job, Key: p.Key,
			ScheduleTime: Micros(p.ScheduleTime), PayloadHash: p.PayloadHash, Payload: p.Payload,
			CreatedAt: now,
		}
	case cur.Status.Terminal():
		return nil, &ledger.AcquireResult{Outcome: ledger.OutcomeFinished, Run: cur}, nil
	case cur.Status == ledger.StatusQueued && cur.NotBefore.After(now):
		return nil, &ledger.AcquireResult{Outcome: ledger.OutcomeHeld, Run: cur, Until: cur.NotBefore}, nil
	case cur.Status == ledger.StatusRunning && !cur.Deadline.Before(now):
		return nil, &ledger.AcquireResult{Outcome: ledger.OutcomeHeld, Run: cur, Until: cur.Deadline}, nil
	case cur.Status == ledger.StatusRunning: // the lease expired: take it over
		r = *cur
		r.AttemptsMade++
		r.LastError = fmt.Sprintf("attempt %d lost its lease at %s", cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
	default:
		r = *cur
	}
	r.Status = ledger.StatusRunning
	r.Attempt++
	r.AttemptID = p.AttemptID
	r.NotBefore = time.Time{}
	r.Deadline = Micros(now.Add(cmp.Or(p.Lease, ledger.DefaultLease)))
	touch(&r, now, p.Retention)
	return &r, &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: &r}, nil
}

// ApplyRenew extends the caller's lease.
func ApplyRenew(cur *ledger.Run, p *ledger.RenewParams, now time.Time) (*ledger.Run, error) {
	now = Micros(now)
	if !Holds(cur, &p.Fence) {
		return nil, leaseLost(p.Fence, cur)
	}
	r := *cur
	withProgress(&r, p.Progress)
	r.Deadline = Micros(now.Add(cmp.Or(p.Lease, ledger.DefaultLease)))
	r.UpdatedAt = now
	if exp := ExpiryOf(&r, now, p.Retention); r.ExpireAt.Before(exp) {
		r.ExpireAt = exp
	}
	return &r, nil
}

// ApplyComplete completes the caller's run. A repeat by the same attempt writes nothing.
func ApplyComplete(cur *ledger.Run, p *ledger.CompleteParams, now time.Time) (next *ledger.Run, answer *ledger.Run, err error) {
	defer func() { record(next, cur, OpComplete, now, Note{}) }()
	now = Micros(now)
	next, answer, err = finish(cur, &p.Fence, ledger.StatusCompleted, "", p.Retention, now)
	if next != nil {
		next.Result = p.Result
		withProgress(next, p.Progress)
	}
	return next, answer, err
}

// ApplyFail fails the caller's run for good. A repeat by the same attempt writes nothing.
func ApplyFail(cur *ledger.Run, p *ledger.FailParams, now time.Time) (next *ledger.Run, answer *ledger.Run, err error) {
	defer func() { record(next, cur, OpFail, now, Note{}) }()
	now = Micros(now)
	next, answer, err = finish(cur, &p.Fence, ledger.StatusFailed, p.Error, p.Retention, now)
	if next != nil {
		withProgress(next, p.Progress)
	}
	return next, answer, err
}

// finish returns (record to write or nil, answer, error).
func finish(cur *ledger.Run, f *ledger.Fence, to ledger.Status, errText string, keep time.Duration, now time.Time) (*ledger.Run, *ledger.Run, error) {
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
func ApplyRelease(cur *ledger.Run, p *ledger.ReleaseParams, now time.Time) (next *ledger.Run, answer *ledger.Run, err error) {
	defer func() { record(next, cur, OpRelease, now, Note{}) }()
	now = Micros(now)
	if cur != nil && cur.Status == ledger.StatusQueued && sameAttempt(cur, &p.Fence) {
		return nil, cur, nil
	}
	if !Holds(cur, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, cur)
	}
	r := *cur
	withProgress(&r, p.Progress)
	r.Status = ledger.StatusQueued
	r.AttemptsMade++
	r.LastError = p.Error
	r.NotBefore = time.Time{}
	if p.RetryAfter > 0 {
		r.NotBefore = Micros(now.Add(p.RetryAfter))
	}
	r.Deadline = Micros(now.Add(p.RetryAfter + cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, &r, nil
}

// ApplyRescue returns a listed run to queued with a fresh pickup deadline.
func ApplyRescue(cur *ledger.Run, p *ledger.RescueParams, now time.Time) (next *ledger.Run, err error) {
	defer func() { record(next, cur, OpRescue, now, Note{}) }()
	now = Micros(now)
	if cur == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	if cur.Status != p.Status || cur.Attempt != p.Attempt || !cur.Deadline.Equal(Micros(p.Deadline)) {
		return nil, fmt.Errorf("%w: run %s is %s at attempt %d with deadline %s since it was listed",
			ledger.ErrConflict, p.RunID, cur.Status, cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
	}
	if cur.Status.Terminal() || !cur.Deadline.Before(now) {
		return nil, fmt.Errorf("%w: run %s is %s and not past its deadline", ledger.ErrConflict, p.RunID, cur.Status)
	}
	r := *cur
	if r.Status == ledger.StatusRunning {
		r.AttemptsMade++
		r.LastError = fmt.Sprintf("attempt %d lost its lease at %s", cur.Attempt, cur.Deadline.Format(time.RFC3339Nano))
		r.AttemptID = ""
		r.Status = ledger.StatusQueued
	}
	r.NotBefore = time.Time{}
	r.Deadline = Micros(now.Add(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, nil
}

// NeedsRescue reports whether r is queued past its pickup deadline or running past its
// lease at now.
func NeedsRescue(r *ledger.Run, now time.Time) bool {
	return (r.Status == ledger.StatusQueued || r.Status == ledger.StatusRunning) && r.Deadline.Before(now)
}

// ApplyBeginEffect records an effect as pending for the caller's attempt.
func ApplyBeginEffect(run *ledger.Run, cur *ledger.Effect, p *ledger.BeginEffectParams, now time.Time) (*ledger.Effect, *ledger.BeginEffectResult, error) {
	now = Micros(now)
	if !Holds(run, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, run)
	}
	if cur != nil && cur.Status == ledger.EffectDone {
		return nil, &ledger.BeginEffectResult{Effect: cur, Done: true}, nil
	}
	e := &ledger.Effect{Key: ledger.EffectKey(p.RunID, p.Name), RunID: p.RunID, Name: p.Name, CreatedAt: now}
	var prev int64
	if cur != nil {
		*e = *cur
		prev = cur.Attempt
	}
	e.Status = ledger.EffectPending
	e.Attempt = p.Attempt
	e.UpdatedAt = now
	e.ExpireAt = Micros(now.Add(retention(p.Retention)))
	return e, &ledger.BeginEffectResult{Effect: e, PreviousAttempt: prev}, nil
}

// ApplyCompleteEffect marks an effect the caller's attempt began as done. A repeat by the
// same attempt writes nothing.
func ApplyCompleteEffect(run *ledger.Run, cur *ledger.Effect, p *ledger.CompleteEffectParams, now time.Time) (*ledger.Effect, *ledger.Effect, error) {
	now = Micros(now)
	if !Holds(run, &p.Fence) {
		return nil, nil, leaseLost(p.Fence, run)
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("%w: effect %q of run %s was never begun", ledger.ErrNotFound, p.Name, p.RunID)
	}
	if cur.Attempt != p.Attempt {
		return nil, nil, Invalidf("effect %q of run %s was begun by attempt %d, not %d: begin it first", p.Name, p.RunID, cur.Attempt, p.Attempt)
	}
	if cur.Status == ledger.EffectDone {
		return nil, cur, nil
	}
	e := *cur
	e.Status = ledger.EffectDone
	e.Ref = p.Ref
	e.DoneAt = now
	e.UpdatedAt = now
	e.ExpireAt = Micros(now.Add(retention(p.Retention)))
	return &e, &e, nil
}
