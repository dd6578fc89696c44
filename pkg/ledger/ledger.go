package ledger

import (
	"bytes"
	"context"
	"slices"
	"time"
)

// Status is the state of a run.
type Status string

// The states of a run. Queued and running runs are live; completed, failed and cancelled
// are terminal.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	// StatusCancelled: an operator cancelled the run (Ledger.Cancel) before it finished.
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status, live ones first.
func Statuses() []Status {
	return []Status{StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled}
}

// Terminal reports whether s is completed, failed or cancelled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of the five states.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Defaults used when a params field is zero.
const (
	// DefaultRetention is how long records are kept after their last write.
	DefaultRetention = 14 * 24 * time.Hour
	// DefaultPickupTimeout is how long a queued run may wait for a worker before the
	// rescuer republishes it.
	DefaultPickupTimeout = 5 * time.Minute
	// DefaultLease is the lease a worker claim takes when none is given.
	DefaultLease = 30 * time.Second
)

// Run is the record of one scheduled run.
type Run struct {
	// ID is the run's ID: a hex SHA-256 (see RunID), safe as a document ID and a key.
	ID        string
	Namespace string
	Job       string
	// ScheduleTime is the scheduler's UTC schedule time; zero when the run is keyed by a
	// caller key.
	ScheduleTime time.Time
	// Key is the caller's identity of the run besides the job: the scheduler's job name
	// (with ScheduleTime), or the Idempotency-Key / job_key.
	Key    string
	Status Status
	// Attempt is the fencing token: bumped by every worker claim, 0 until the first.
	Attempt int64
	// AttemptID identifies the current claim (the ingress claim's, then each worker
	// claim's); with Attempt it fences every later transition.
	AttemptID string
	// Deadline is the pickup deadline of a queued run and the lease expiry of a running
	// one; zero for a terminal run. The rescuer republishes runs past it.
	Deadline time.Time
	// NotBefore is the earliest time a released run may be claimed again (Retry-After);
	// zero when it may be claimed at once.
	NotBefore time.Time
	// PayloadHash is the hex SHA-256 of the payload the run was claimed with.
	PayloadHash string
	// Payload is the caller's payload, kept so that the rescuer can republish a run
	// whose message was lost.
	Payload []byte
	// AttemptsMade counts attempts that ended with an outcome recorded (released,
	// completed or failed) or that the rescuer found dead, since the run was claimed or
	// last retried by an operator (Ledger.Retry gives a fresh attempt budget): the
	// current attempt is the (AttemptsMade+1)-th of its budget.
	AttemptsMade int64
	// LastError is the error of the latest released, rescued or failed attempt.
	LastError string
	// Result is what the completed attempt returned (JSON, at most MaxResult bytes),
	// stored by Complete; nil when it returned none. It is replayed to duplicates,
	// never recomputed.
	Result []byte
	// Progress is how far the run's work has got (JSON, at most MaxProgress bytes: a
	// batch's items done, failed and total), as the latest attempt last wrote it with
	// a renewal or a finishing write; nil when none was written.
	Progress    []byte
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time
	// ExpireAt is when the record may be deleted: the retention after the latest of the
	// last write, Deadline and NotBefore (ExpiryOf). A record past ExpireAt that still
	// exists still deduplicates.
	ExpireAt time.Time
	// History is the run's latest events (at most MaxHistory), oldest first, on the
	// backends that keep one (ledgertest.Harness.History); nil elsewhere and in List's
	// answers.
	History []Event
}

// Clone returns a copy of r that shares no slice with it (nil for nil): a backend that
// keeps records in memory hands out and keeps copies.
func (r *Run) Clone() *Run {
	if r == nil {
		return nil
	}
	c := *r
	c.Payload = bytes.Clone(r.Payload)
	c.History = slices.Clone(r.History)
	c.Result = bytes.Clone(r.Result)
	c.Progress = bytes.Clone(r.Progress)
	return &c
}

// EffectStatus is the state of an effect record.
type EffectStatus string

// The states of an effect.
const (
	EffectPending EffectStatus = "pending"
	EffectDone    EffectStatus = "done"
)

// Effect is the record of one side effect of a run.
type Effect struct {
	// Key is EffectKey(RunID, Name): pass it downstream as Idempotency-Key.
	Key    string
	RunID  string
	Name   string
	Status EffectStatus
	// Attempt is the attempt that began the effect (pending) or did it (done).
	Attempt int64
	// Ref is what the effect made, recorded when it was marked done (e.g. the name of
	// a started Workflows execution); empty when the effect recorded none.
	Ref       string
	CreatedAt time.Time
	UpdatedAt time.Time
	DoneAt    time.Time
	ExpireAt  time.Time
}

// Identity is what a run is: the fields the ingress derives the run ID from. A worker
// claim carries it so that it can create a run whose ingress record is missing.
type Identity struct {
	RunID        string
	Namespace    string
	Job          string
	Key          string
	ScheduleTime time.Time
	PayloadHash  string
	// Payload is stored with a run the claim creates.
	Payload []byte
}

// ClaimParams are the parameters of the ingress claim.
type ClaimParams struct {
	Identity
	// AttemptID identifies this claim, so that Expedite touches only the run it created.
	AttemptID string
	// PickupTimeout sets the queued run's Deadline. Zero means DefaultPickupTimeout.
	PickupTimeout time.Duration
	// Retention sets ExpireAt. Zero means DefaultRetention.
	Retention time.Duration
	// Now replaces the backend's clock, for tests, where the backend supports it.
	Now time.Time
}

// ClaimResult is the answer of the ingress claim.
type ClaimResult struct {
	// Run is the new run, or the existing one.
	Run *Run
	// Created is true when this claim created the run.
	Created bool
	// PayloadMismatch is true when the run existed with another payload hash.
	PayloadMismatch bool
}

// ExpediteParams identify an ingress claim whose publish failed, or whose claim call
// failed after it may have been written.
type ExpediteParams struct {
	RunID     string
	AttemptID string
	Retention time.Duration
	Now       time.Time
}

// AcquireParams are the parameters of the worker claim.
type AcquireParams struct {
	// Identity creates the run when it is absent (its ingress record was never written
	// or was deleted); RunID is required.
	Identity
	// AttemptID is the new attempt's ID (a UUIDv7).
	AttemptID string
	// MustExist refuses to create an absent run: the claim answers ErrNotFound instead.
	// A worker sets it for a message that may have outlived its run's record (older
	// than the retention): running it could run a finished run twice.
	MustExist bool
	// Lease sets the lease expiry. Zero means DefaultLease.
	Lease time.Duration
	// Worker identifies the claiming worker (host/instance) in the run's history; at
	// most MaxEventText bytes are kept.
	Worker    string
	Retention time.Duration
	Now       time.Time
}

// AcquireOutcome says what a worker claim found.
type AcquireOutcome int

// The outcomes of a worker claim.
const (
	// OutcomeAcquired: the caller now holds the run (Run.Attempt, Run.AttemptID).
	OutcomeAcquired AcquireOutcome = iota + 1
	// OutcomeHeld: another live attempt holds the run, or a released run may not be retried
	// yet; Until says when to come back. Not an error: the delivery is nacked.
	OutcomeHeld
	// OutcomeFinished: the run is completed or failed; nothing to do.
	OutcomeFinished
	// OutcomePayloadMismatch: the run exists with another payload hash than the claim's
	// (Identity.PayloadHash, which the worker computes from the message's data): the
	// message is not the one the run was accepted with, and must never run. The run is
	// untouched.
	OutcomePayloadMismatch
)

func (o AcquireOutcome) String() string {
	switch o {
	case OutcomeAcquired:
		return "acquired"
	case OutcomeHeld:
		return "held"
	case OutcomeFinished:
		return "finished"
	case OutcomePayloadMismatch:
		return "payload_mismatch"
	}
	return "unknown"
}

// AcquireResult is the answer of the worker claim.
type AcquireResult struct {
	Outcome AcquireOutcome
	Run     *Run
	// Until is when the current lease ends (or the retry delay ends) when Outcome is Held.
	Until time.Time
}

// Fence identifies the attempt a fenced transition is made by.
type Fence struct {
	RunID     string
	Attempt   int64
	AttemptID string
}

// RenewParams extend the lease of the caller's attempt.
type RenewParams struct {
	Fence
	// Progress, when set, replaces the run's Progress (at most MaxProgress bytes of
	// JSON, ErrInvalid otherwise); nil leaves it.
	Progress []byte
	Lease    time.Duration
	// Retention keeps ExpireAt at least this long after the new lease expiry. Zero
	// means DefaultRetention.
	Retention time.Duration
	Now       time.Time
}

// CompleteParams complete the caller's attempt.
type CompleteParams struct {
	Fence
	// Progress, when set, replaces the run's Progress (at most MaxProgress bytes of
	// JSON, ErrInvalid otherwise); nil leaves it.
	Progress []byte
	// Result, when set, is stored as the run's Result: a JSON value of at most
	// MaxResult bytes (ErrInvalid otherwise, and nothing is written).
	Result    []byte
	Retention time.Duration
	Now       time.Time
}

// ReleaseParams return the caller's attempt's run to queued for a retry.
type ReleaseParams struct {
	Fence
	// Progress, when set, replaces the run's Progress (at most MaxProgress bytes of
	// JSON, ErrInvalid otherwise); nil leaves it.
	Progress []byte
	// Error is kept as the run's LastError.
	Error string
	// RetryAfter delays the next claim (NotBefore = now + RetryAfter). It must not be
	// negative nor longer than the retention (ErrInvalid).
	RetryAfter time.Duration
	// PickupTimeout sets the pickup deadline after NotBefore. Zero means the default.
	PickupTimeout time.Duration
	Retention     time.Duration
	Now           time.Time
}

// FailParams fail the caller's attempt's run for good.
type FailParams struct {
	Fence
	// Progress, when set, replaces the run's Progress (at most MaxProgress bytes of
	// JSON, ErrInvalid otherwise); nil leaves it.
	Progress  []byte
	Error     string
	Retention time.Duration
	Now       time.Time
}

// GetParams name a run.
type GetParams struct {
	RunID string
}

// BeginEffectParams record an effect before it is done.
type BeginEffectParams struct {
	Fence
	Name      string
	Retention time.Duration
	Now       time.Time
}

// BeginEffectResult says what to do with an effect.
type BeginEffectResult struct {
	Effect *Effect
	// Done is true when an earlier attempt did the effect: skip it.
	Done bool
	// PreviousAttempt is the attempt that had begun the effect and left it pending, or
	// 0 when the effect is new. It was taken over by the caller's attempt: the effect may
	// or may not have happened.
	PreviousAttempt int64
}

// CompleteEffectParams mark an effect done.
type CompleteEffectParams struct {
	Fence
	Name string
	// Ref, when set, is recorded as the effect's Ref (at most MaxEffectRef bytes).
	Ref       string
	Retention time.Duration
	Now       time.Time
}

// MaxEffectRef is the longest Ref an effect records.
const MaxEffectRef = 1024

// GetEffectParams name an effect.
type GetEffectParams struct {
	RunID string
	Name  string
}

// ListRescueParams select runs that need rescue.
type ListRescueParams struct {
	// Limit bounds the answer; zero means 100.
	Limit int
	Now   time.Time
}

// RescueParams return a run found by ListRescue to queued with a fresh pickup deadline,
// so that exactly one rescuer republishes it.
type RescueParams struct {
	// RunID, Status, Attempt and Deadline are the run as listed: the rescue happens only
	// if it is unchanged and still past its deadline.
	RunID         string
	Status        Status
	Attempt       int64
	Deadline      time.Time
	PickupTimeout time.Duration
	Retention     time.Duration
	Now           time.Time
}

// SweepParams bound a sweep.
type SweepParams struct {
	// Limit bounds the records deleted in one call; zero means 500.
	Limit int
	Now   time.Time
}

// Driver is what a backend implements: the ledger's operations on its storage, and
// nothing else. Programs do not call a Driver: they hold a *Ledger (New, Open), which
// validates each call's parameters before the driver sees them (a driver may rely on
// it), bounds its time, traces it and wraps its errors. The methods' contracts are
// documented here; Ledger's methods carry them out. All methods are safe for
// concurrent use. Times in records are the backend's, in UTC.
type Driver interface {
	// Claim is the ingress claim: it creates the run as queued, or returns the existing
	// one (reporting a payload mismatch).
	Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error)
	// Expedite makes a run its ingress claim created, and that nothing touched since
	// (still queued, attempt 0, same AttemptID), due now: its pickup deadline becomes the
	// ledger's now, so that the rescuer and the next duplicate republish it at once. The
	// ingress calls it when it could not publish a claim. It never deletes the record:
	// a concurrent duplicate may already have been answered 2xx for it. It returns
	// ErrLeaseLost when the run moved on (a worker has it) and ErrNotFound when absent
	// (the claim never landed).
	Expedite(ctx context.Context, p *ExpediteParams) (*Run, error)
	// Acquire is the worker claim.
	Acquire(ctx context.Context, p *AcquireParams) (*AcquireResult, error)
	// Renew extends the caller's lease. ErrLeaseLost when fenced out.
	Renew(ctx context.Context, p *RenewParams) (*Run, error)
	// Complete marks the caller's run completed. ErrLeaseLost when fenced out; a repeat
	// by the attempt that completed it returns the run.
	Complete(ctx context.Context, p *CompleteParams) (*Run, error)
	// Release returns the caller's run to queued, error kept, attempt counted.
	Release(ctx context.Context, p *ReleaseParams) (*Run, error)
	// Fail marks the caller's run failed.
	Fail(ctx context.Context, p *FailParams) (*Run, error)
	// Get returns a run or ErrNotFound.
	Get(ctx context.Context, p *GetParams) (*Run, error)
	// BeginEffect records an effect as pending for the caller's attempt, or reports that
	// an earlier attempt did it. ErrLeaseLost when fenced out.
	BeginEffect(ctx context.Context, p *BeginEffectParams) (*BeginEffectResult, error)
	// CompleteEffect marks an effect the caller's attempt began as done.
	CompleteEffect(ctx context.Context, p *CompleteEffectParams) (*Effect, error)
	// GetEffect returns an effect or ErrNotFound.
	GetEffect(ctx context.Context, p *GetEffectParams) (*Effect, error)
	// ListRescue lists queued runs past their pickup deadline and running runs past
	// their lease, oldest deadline first.
	ListRescue(ctx context.Context, p *ListRescueParams) ([]*Run, error)
	// Rescue returns a listed run to queued with a fresh pickup deadline (see
	// RescueParams). ErrConflict when it changed since it was listed.
	Rescue(ctx context.Context, p *RescueParams) (*Run, error)
	// Sweep deletes runs and effects past ExpireAt, at most Limit, and returns how many.
	// Backends with a native TTL may delete more lazily; the sweep is still correct there.
	Sweep(ctx context.Context, p *SweepParams) (int, error)
	// List lists runs matching the filters, newest first, one bounded page at a time
	// (see ListParams), served by an index on every backend. The runs carry neither
	// Payload nor History.
	List(ctx context.Context, p *ListParams) (*ListResult, error)
	// ListRunIDs returns the IDs of the runs whose ID starts with p.Prefix, ascending,
	// at most p.Limit: a range scan of the primary key (RunIDRange) on every backend.
	// It finds the run a person names by the first digits of its ID (LookupRunID).
	ListRunIDs(ctx context.Context, p *ListRunIDsParams) ([]string, error)
	// ListEffects returns the effects of one run, at most MaxListedEffects, by name.
	ListEffects(ctx context.Context, p *ListEffectsParams) ([]*Effect, error)
	// Retry returns a failed run to queued with a fresh attempt budget (AttemptsMade 0)
	// and a fresh pickup deadline; its done effects stay done. The caller republishes it.
	// ErrWrongStatus when the run is not failed.
	Retry(ctx context.Context, p *OperatorParams) (*Run, error)
	// Cancel makes a queued or running run cancelled, a terminal status: its holder's
	// next fenced write (renewal, effect, completion) gets ErrLeaseLost wrapping
	// ErrCancelled. ErrWrongStatus when the run is not queued or running.
	Cancel(ctx context.Context, p *OperatorParams) (*Run, error)
	// OperatorRelease ends the lease of a running run whose holder is gone, now: the run
	// is queued again (the attempt counted as dead) with a fresh pickup deadline, and the
	// holder is fenced out. The caller republishes it. ErrWrongStatus when the run is
	// not running.
	OperatorRelease(ctx context.Context, p *OperatorParams) (*Run, error)
	// ResolveEffect settles an effect a failed run left uncertain (begun and never
	// marked done: it may or may not have happened) with an operator's verdict, and
	// queues the run again as Retry does, in one atomic write: Done marks the effect
	// done with Ref (it happened; a later attempt skips it, or follows Ref); not Done
	// leaves it pending as if no attempt had begun it (PreviousAttempt 0 for the next
	// BeginEffect: it did not happen, do it under the same key). The caller republishes
	// the run. ErrWrongStatus when the run is not failed or the effect is already done;
	// ErrNotFound when the run or the effect is absent.
	ResolveEffect(ctx context.Context, p *ResolveEffectParams) (*Run, error)
	// Ping checks that the backend is reachable.
	Ping(ctx context.Context) error
	// Close releases the client's resources.
	Close() error
}
