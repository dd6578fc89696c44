package receiver

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Store keeps the receiver's records: one per scoped Idempotency-Key (claimed while a
// request is in flight, then holding its response) and one per run (the highest attempt
// seen, the fence). Every method is atomic, and leases and expiry are judged by the
// store's own clock (the database's, or the host's for the embedded ones), never the
// caller's. Implementations live in subpackages (memory, sqlite, postgres,
// firestorereceiver, spannerreceiver, redisreceiver), and each passes the conformance
// suite pkg/receiver/receivertest; a new one should too. Backends that read a record
// and write it back in one transaction apply the rules of pkg/receiver/driver.
type Store interface {
	// Claim decides a request, atomically with its run's fence:
	//
	//   - With Fence set, a run whose highest attempt seen is above Fence.Attempt answers
	//     OutcomeFenced and nothing is written; a lower one is raised to Fence.Attempt,
	//     whatever the key's outcome.
	//   - Without a Key (a fence only), the answer is OutcomeClaimed.
	//   - A live record (ExpireAt not passed) with another fingerprint answers
	//     OutcomeMismatch; a completed one OutcomeCompleted; one in flight whose lease
	//     has not passed OutcomeInFlight, with the lease left.
	//   - Otherwise (no record, an expired one, or one in flight whose lease passed) the
	//     key is claimed for Token, in flight until now + Lease: OutcomeClaimed.
	Claim(ctx context.Context, p *ClaimParams) (*Claim, error)
	// Renew extends the lease of the key's claim by Token to now + Lease. It answers
	// ErrLeaseLost when the key is no longer in flight under Token (taken over after
	// its lease passed, released, completed or gone); a lease that passed while nobody
	// took it over is renewed.
	Renew(ctx context.Context, p *RenewParams) error
	// Complete stores the response of the key's claim by Token, for every later
	// request with the key to replay. ErrLeaseLost as for Renew; completing again with
	// the same Token changes nothing and succeeds.
	Complete(ctx context.Context, p *CompleteParams) error
	// Release deletes the key's claim by Token, so that the next request with the key
	// is executed at once. ErrLeaseLost when another Token holds the key or it is
	// completed; nothing to release (the record is gone) succeeds.
	Release(ctx context.Context, p *ReleaseParams) error
	// Get returns the key's record as stored, expired or not; ErrNotFound when there is
	// none.
	Get(ctx context.Context, key string) (*Record, error)
	// Sweep deletes up to limit key records and up to limit fences whose ExpireAt
	// passed, and returns how many it deleted. Stores whose backend expires records by
	// itself (Redis) may delete nothing; an expired record still there is treated as
	// absent by Claim either way.
	Sweep(ctx context.Context, limit int) (int, error)
	// Close releases the store's resources (not a caller's client or pool).
	Close() error
}

// Errors of a Store. Callers compare with errors.Is.
var (
	// ErrNotFound: Get found no record for the key.
	ErrNotFound = errors.New("receiver: no record for the key")
	// ErrLeaseLost: the key is no longer in flight under the caller's token.
	ErrLeaseLost = errors.New("receiver: the key's lease is lost")
	// ErrContended: the store gave up on a write that kept conflicting with others
	// (a transaction retried to its limit); nothing was decided, and a retry is safe.
	ErrContended = errors.New("receiver: the store is contended; retry")
	// ErrInvalid: the parameters break a rule (an empty token, a key that is not a
	// scoped key, a non-positive lease); the error names which.
	ErrInvalid = errors.New("receiver: invalid parameters")
)

// ClaimParams are the parameters of Store.Claim.
type ClaimParams struct {
	// Key is the scoped key (ScopedKey: 64 lower-case hex digits); empty for a request
	// that only passes the fence.
	Key string
	// Fingerprint identifies the request's content (Fingerprint); a key reused with
	// another is refused.
	Fingerprint string
	// Token identifies this claim: unique per request (a random UUID).
	Token string
	// Lease is how long the claim stays in flight unless renewed.
	Lease time.Duration
	// Retention is how long records live after their last write (a claim's after its
	// lease): a record past it is treated as absent and swept.
	Retention time.Duration
	// Fence, when set, is the run and attempt the request comes from.
	Fence *Fence
}

// Fence is the run a request belongs to and the attempt of that run that sent it.
type Fence struct {
	// Run is the scoped run (ScopedRun: 64 lower-case hex digits).
	Run string
	// Attempt is the run's attempt, at least 1; runonce raises it with every takeover.
	Attempt int64
}

// Outcome is what Claim decided.
type Outcome string

// The outcomes of Claim.
const (
	// OutcomeClaimed: the caller holds the key (or, without a key, passed the fence)
	// and executes the request.
	OutcomeClaimed Outcome = "claimed"
	// OutcomeInFlight: another request holds the key and its lease has not passed.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeCompleted: the key's response is stored; the caller replays it.
	OutcomeCompleted Outcome = "completed"
	// OutcomeMismatch: the key is live with another fingerprint.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeFenced: the run has seen a newer attempt than the request's.
	OutcomeFenced Outcome = "fenced"
)

// Claim is the answer of Store.Claim.
type Claim struct {
	Outcome Outcome
	// Record is the key's record: the one written (claimed), or the one found (in
	// flight, completed, mismatch). Nil for a fence-only claim and when fenced.
	Record *Record
	// LeaseLeft is, when in flight, how long the holder's lease still runs by the
	// store's clock.
	LeaseLeft time.Duration
	// Attempt is, when fenced, the highest attempt the run has seen.
	Attempt int64
}

// State is the state of a key's record.
type State string

// The states of a key's record.
const (
	StateInFlight  State = "in_flight"
	StateCompleted State = "completed"
)

// Record is a key's record.
type Record struct {
	Key         string
	Fingerprint string
	State       State
	// Token is the claim's (in flight), or the one that completed it.
	Token string
	// Attempt is the run attempt of the request that claimed the key; 0 without a fence.
	Attempt int64
	// LeaseUntil is when the claim stops being in flight unless renewed; zero once
	// completed.
	LeaseUntil time.Time
	// Response is the stored response, once completed.
	Response  *Response
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpireAt is when the record stops counting: Retention after its last write (a
	// claim's lease included).
	ExpireAt time.Time
}

// Response is a stored response.
type Response struct {
	Status int
	// Header holds the headers the receiver keeps (Options.StoreHeaders).
	Header http.Header
	Body   []byte
	// BodyOmitted: the body was longer than Options.MaxResponseBody and is not kept;
	// a replay carries no body and says so (HeaderBodyOmitted).
	BodyOmitted bool
}

// RenewParams are the parameters of Store.Renew.
type RenewParams struct {
	Key, Token string
	Lease      time.Duration
	Retention  time.Duration
}

// CompleteParams are the parameters of Store.Complete.
type CompleteParams struct {
	Key, Token string
	Response   *Response
	Retention  time.Duration
}

// ReleaseParams are the parameters of Store.Release.
type ReleaseParams struct {
	Key, Token string
}
