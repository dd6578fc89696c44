package receiver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// DefaultProblemBase is where the problem types the receiver answers with are described:
// each type is this URL with the problem's name as fragment (…/receiver.md#in-flight).
const DefaultProblemBase = "https://github.com/runonce/runonce/blob/main/docs/receiver.md"

// The names of the problems the receiver answers with: the fragment of each one's type
// URI, and a heading of docs/receiver.md.
const (
	ProblemMissingKey       = "missing-key"       // 400
	ProblemMalformedKey     = "malformed-key"     // 400
	ProblemMalformedRun     = "malformed-run"     // 400
	ProblemBodyTooLarge     = "body-too-large"    // 413
	ProblemInFlight         = "in-flight"         // 409 + Retry-After
	ProblemKeyReused        = "key-reused"        // 422
	ProblemStaleAttempt     = "stale-attempt"     // 409
	ProblemStoreUnavailable = "store-unavailable" // 503 + Retry-After
)

// problem is an RFC 9457 problem detail, as the Idempotency-Key draft's examples answer
// (application/problem+json), with the receiver's extension members.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RunID, Attempt and NewerAttempt explain a stale attempt's refusal.
	RunID        string `json:"run_id,omitempty"`
	Attempt      int64  `json:"attempt,omitempty"`
	NewerAttempt int64  `json:"newer_attempt,omitempty"`
	// HeldByAttempt names the run attempt whose request holds the key, when in flight.
	HeldByAttempt int64 `json:"held_by_attempt,omitempty"`
}

// writeProblem answers p, with Retry-After when retryAfter is positive (rounded up to
// whole seconds), and a Link to the problem's description as the draft suggests.
func (rc *Receiver) writeProblem(w http.ResponseWriter, name string, p problem, retryAfter time.Duration) {
	p.Type = rc.opts.ProblemBase + "#" + name
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Link", "<"+p.Type+`>; rel="describedby"`)
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
