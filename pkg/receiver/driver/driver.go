// Package driver is the kit of receiver stores, not part of a user's API: the rules of
// pkg/receiver's Store as pure functions over a key's record and a run's fence, the
// checks of their parameters, and the encoding of stored headers.
//
// A store that can read a key's record and its run's fence and write them back in one
// transaction (memory, SQLite, Firestore, Spanner) reads them, calls DecideClaim,
// ApplyRenew, ApplyComplete or ApplyRelease with its own clock's now, and writes what
// they return. A store that expresses the rules in its own language (PostgreSQL's
// PL/pgSQL, Redis's Lua) must agree with them; the conformance suite
// (pkg/receiver/receivertest) holds every store to them.
package driver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
)

// Micros truncates t to the microsecond, the precision every store keeps, so that a
// record read back equals the one written.
func Micros(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// Decision is what DecideClaim decided: the answer, and the writes that make it so.
type Decision struct {
	Claim *receiver.Claim
	// Put is the key's record to write (create, or replace the one read); nil: none.
	Put *receiver.Record
	// Fence, when above zero, is the attempt to write as the run's fence, with
	// FenceExpireAt.
	Fence         int64
	FenceExpireAt time.Time
}

// Writes reports whether the decision writes anything.
func (d Decision) Writes() bool { return d.Put != nil || d.Fence > 0 }

// Live reports whether rec counts at now: it exists and its retention has not passed.
func Live(rec *receiver.Record, now time.Time) bool {
	return rec != nil && now.Before(rec.ExpireAt)
}

// LiveFence is the fence DecideClaim takes of a stored one: attempt, or 0 once its
// expireAt passed at now.
func LiveFence(attempt int64, expireAt, now time.Time) int64 {
	if !now.Before(expireAt) {
		return 0
	}
	return attempt
}

// DecideClaim applies Store.Claim's rules at now to the key's record cur (nil when
// absent) and the run's fence (its highest attempt; 0 when absent or expired).
func DecideClaim(now time.Time, cur *receiver.Record, fence int64, p *receiver.ClaimParams) Decision {
	now = Micros(now)
	var d Decision
	if p.Fence != nil {
		if fence > p.Fence.Attempt {
			d.Claim = &receiver.Claim{Outcome: receiver.OutcomeFenced, Attempt: fence}
			return d
		}
		if fence < p.Fence.Attempt {
			d.Fence, d.FenceExpireAt = p.Fence.Attempt, now.Add(p.Retention)
		}
	}
	if p.Key == "" {
		d.Claim = &receiver.Claim{Outcome: receiver.OutcomeClaimed}
		return d
	}
	if Live(cur, now) {
		switch {
		case cur.Fingerprint != p.Fingerprint:
			d.Claim = &receiver.Claim{Outcome: receiver.OutcomeMismatch, Record: cur}
			return d
		case cur.State == receiver.StateCompleted:
			d.Claim = &receiver.Claim{Outcome: receiver.OutcomeCompleted, Record: cur}
			return d
		case now.Before(cur.LeaseUntil):
			d.Claim = &receiver.Claim{Outcome: receiver.OutcomeInFlight, Record: cur, LeaseLeft: cur.LeaseUntil.Sub(now)}
			return d
		}
		// In flight with its lease passed: the holder died or stalled; take it over.
	}
	var attempt int64
	if p.Fence != nil {
		attempt = p.Fence.Attempt
	}
	until := now.Add(p.Lease)
	d.Put = &receiver.Record{
		Key: p.Key, Fingerprint: p.Fingerprint, State: receiver.StateInFlight, Token: p.Token, Attempt: attempt,
		LeaseUntil: until, CreatedAt: now, UpdatedAt: now, ExpireAt: until.Add(p.Retention),
	}
	d.Claim = &receiver.Claim{Outcome: receiver.OutcomeClaimed, Record: d.Put}
	return d
}

// holds reports whether cur is the in-flight claim of token.
func holds(cur *receiver.Record, token string) bool {
	return cur != nil && cur.State == receiver.StateInFlight && cur.Token == token
}

// ApplyRenew returns cur with its lease extended to now + Lease, or ErrLeaseLost.
func ApplyRenew(now time.Time, cur *receiver.Record, p *receiver.RenewParams) (*receiver.Record, error) {
	if !holds(cur, p.Token) {
		return nil, lost(cur, p.Key)
	}
	now = Micros(now)
	next := *cur
	next.LeaseUntil = now.Add(p.Lease)
	next.UpdatedAt = now
	next.ExpireAt = next.LeaseUntil.Add(p.Retention)
	return &next, nil
}

// ApplyComplete returns cur completed with the response, nil when it already is (by the
// same token), or ErrLeaseLost.
func ApplyComplete(now time.Time, cur *receiver.Record, p *receiver.CompleteParams) (*receiver.Record, error) {
	if cur != nil && cur.State == receiver.StateCompleted && cur.Token == p.Token {
		return nil, nil
	}
	if !holds(cur, p.Token) {
		return nil, lost(cur, p.Key)
	}
	now = Micros(now)
	next := *cur
	next.State = receiver.StateCompleted
	next.LeaseUntil = time.Time{}
	next.Response = p.Response
	next.UpdatedAt = now
	next.ExpireAt = now.Add(p.Retention)
	return &next, nil
}

// ApplyRelease reports whether cur is to be deleted: true when token holds it, false
// when there is nothing (cur nil), else ErrLeaseLost.
func ApplyRelease(cur *receiver.Record, p *receiver.ReleaseParams) (bool, error) {
	if cur == nil {
		return false, nil
	}
	if !holds(cur, p.Token) {
		return false, lost(cur, p.Key)
	}
	return true, nil
}

func lost(cur *receiver.Record, key string) error {
	if cur == nil {
		return fmt.Errorf("%w: key %s has no record", receiver.ErrLeaseLost, key)
	}
	return fmt.Errorf("%w: key %s is %s under another claim", receiver.ErrLeaseLost, key, cur.State)
}

// ValidateClaim checks Claim's parameters.
func ValidateClaim(p *receiver.ClaimParams) error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil ClaimParams", receiver.ErrInvalid)
	case p.Key == "" && p.Fence == nil:
		return fmt.Errorf("%w: a claim needs a key, a fence or both", receiver.ErrInvalid)
	case p.Key != "" && !receiver.ValidScoped(p.Key):
		return fmt.Errorf("%w: key %q is not a scoped key (receiver.ScopedKey)", receiver.ErrInvalid, p.Key)
	case p.Key != "" && p.Fingerprint == "":
		return fmt.Errorf("%w: a key claim needs a fingerprint", receiver.ErrInvalid)
	case p.Token == "":
		return fmt.Errorf("%w: empty token", receiver.ErrInvalid)
	case p.Lease <= 0, p.Retention <= 0:
		return fmt.Errorf("%w: lease %s and retention %s must be positive", receiver.ErrInvalid, p.Lease, p.Retention)
	case p.Fence != nil && !receiver.ValidScoped(p.Fence.Run):
		return fmt.Errorf("%w: run %q is not a scoped run (receiver.ScopedRun)", receiver.ErrInvalid, p.Fence.Run)
	case p.Fence != nil && p.Fence.Attempt < 1:
		return fmt.Errorf("%w: attempt %d is not positive", receiver.ErrInvalid, p.Fence.Attempt)
	}
	return nil
}

// ValidateRenew checks Renew's parameters.
func ValidateRenew(p *receiver.RenewParams) error {
	if p == nil {
		return fmt.Errorf("%w: nil RenewParams", receiver.ErrInvalid)
	}
	if err := validateHolder(p.Key, p.Token); err != nil {
		return err
	}
	if p.Lease <= 0 || p.Retention <= 0 {
		return fmt.Errorf("%w: lease %s and retention %s must be positive", receiver.ErrInvalid, p.Lease, p.Retention)
	}
	return nil
}

// ValidateComplete checks Complete's parameters.
func ValidateComplete(p *receiver.CompleteParams) error {
	if p == nil {
		return fmt.Errorf("%w: nil CompleteParams", receiver.ErrInvalid)
	}
	if err := validateHolder(p.Key, p.Token); err != nil {
		return err
	}
	switch {
	case p.Response == nil:
		return fmt.Errorf("%w: no response to store", receiver.ErrInvalid)
	case p.Response.Status < 100 || p.Response.Status > 999:
		return fmt.Errorf("%w: status %d", receiver.ErrInvalid, p.Response.Status)
	case len(p.Response.Body) > receiver.MaxStoredBody:
		return fmt.Errorf("%w: a body of %d bytes, more than %d", receiver.ErrInvalid, len(p.Response.Body), receiver.MaxStoredBody)
	case p.Retention <= 0:
		return fmt.Errorf("%w: retention %s must be positive", receiver.ErrInvalid, p.Retention)
	}
	return nil
}

// ValidateRelease checks Release's parameters.
func ValidateRelease(p *receiver.ReleaseParams) error {
	if p == nil {
		return fmt.Errorf("%w: nil ReleaseParams", receiver.ErrInvalid)
	}
	return validateHolder(p.Key, p.Token)
}

func validateHolder(key, token string) error {
	switch {
	case !receiver.ValidScoped(key):
		return fmt.Errorf("%w: key %q is not a scoped key", receiver.ErrInvalid, key)
	case token == "":
		return fmt.Errorf("%w: empty token", receiver.ErrInvalid)
	}
	return nil
}

// EncodeHeader encodes a stored response's headers as JSON ("{}" for none).
func EncodeHeader(h http.Header) []byte {
	if h == nil {
		h = http.Header{}
	}
	b, _ := json.Marshal(h) // map[string][]string always marshals
	return b
}

// DecodeHeader decodes EncodeHeader's output; empty input is no headers.
func DecodeHeader(b []byte) (http.Header, error) {
	h := http.Header{}
	if len(b) == 0 {
		return h, nil
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("stored headers %q: %w", b, err)
	}
	return h, nil
}
