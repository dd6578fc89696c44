package ledger

import (
	"fmt"
	"time"
)

// This file holds the operators' side of the ledger's contract: listing runs, the
// history of a run, and the parameters of the operator transitions (retry, cancel,
// release, and resolving an uncertain effect). Their rules are in package driver.

// Bounds of the operators' records.
const (
	// MaxHistory is how many events a run keeps; older ones are dropped first.
	MaxHistory = 50
	// MaxEventText bounds an event's text (error or reason), worker and actor, in bytes:
	// MaxHistory events stay far inside Firestore's 1 MiB document.
	MaxEventText = 1024
	// MaxReason is the longest reason an operator may give.
	MaxReason = 512
	// DefaultPageSize and MaxPageSize bound List's pages.
	DefaultPageSize = 50
	MaxPageSize     = 200
	// MaxListedEffects bounds ListEffects.
	MaxListedEffects = 1000
)

// EventKind names what happened to a run.
type EventKind string

// The events of a run's history.
const (
	// EventClaimed: the ingress claim created the run.
	EventClaimed EventKind = "claimed"
	// EventStarted: a worker claim started attempt Attempt (Worker says which worker).
	EventStarted EventKind = "started"
	// EventCompleted, EventFailed, EventReleased: the attempt's outcome (Text is the
	// error of a failed or released attempt).
	EventCompleted EventKind = "completed"
	EventFailed    EventKind = "failed"
	EventReleased  EventKind = "released"
	// EventLeaseLost: the attempt's lease ran out and another claim or the rescuer took
	// the run over.
	EventLeaseLost EventKind = "lease_lost"
	// EventRescued: a queued run past its pickup deadline was made due again and
	// republished.
	EventRescued EventKind = "rescued"
	// EventRetried, EventCancelled, EventOperatorReleased: an operator's action (Actor
	// and Text, the reason, say who and why).
	EventRetried          EventKind = "retried"
	EventCancelled        EventKind = "cancelled"
	EventOperatorReleased EventKind = "operator_released"
	// EventEffectResolved: an operator settled an uncertain effect (Text names it, says
	// whether it happened, then gives the reason) and so queued the run again, as a
	// retry does.
	EventEffectResolved EventKind = "effect_resolved"
)

// Event is one entry of a run's history.
type Event struct {
	At   time.Time `json:"at"`
	Kind EventKind `json:"kind"`
	// Attempt is the attempt the event is about (0 before the first worker claim).
	Attempt int64 `json:"attempt"`
	// Worker is the identity the claiming worker reported (EventStarted).
	Worker string `json:"worker,omitempty"`
	// Actor is the operator who acted (operator events).
	Actor string `json:"actor,omitempty"`
	// Text is the attempt's error, or the operator's reason.
	Text string `json:"text,omitempty"`
}

// AttemptSummary is one attempt of a run, as its history tells it.
type AttemptSummary struct {
	Attempt int64     `json:"attempt"`
	Worker  string    `json:"worker,omitempty"`
	Started time.Time `json:"started"`
	// Ended is zero while the attempt runs (or when the history lost its end).
	Ended time.Time `json:"ended,omitzero"`
	// Outcome is the kind of the event that ended it (completed, failed, released,
	// lease_lost, cancelled, operator_released); empty while it runs.
	Outcome EventKind `json:"outcome,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// Attempts folds a history into one summary per attempt, oldest first.
func Attempts(h []Event) []AttemptSummary {
	var out []AttemptSummary
	find := func(n int64) *AttemptSummary {
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Attempt == n {
				return &out[i]
			}
		}
		return nil
	}
	for _, e := range h {
		switch e.Kind {
		case EventStarted:
			out = append(out, AttemptSummary{Attempt: e.Attempt, Worker: e.Worker, Started: e.At})
		case EventCompleted, EventFailed, EventReleased, EventLeaseLost, EventCancelled, EventOperatorReleased:
			if a := find(e.Attempt); a != nil && a.Outcome == "" {
				a.Ended, a.Outcome, a.Error = e.At, e.Kind, e.Text
				if e.Actor != "" {
					a.Error = fmt.Sprintf("%s by %s: %s", e.Kind, e.Actor, e.Text)
				}
			}
		}
	}
	return out
}

// OperatorParams are the parameters of an operator's action on a run.
type OperatorParams struct {
	RunID string
	// Actor is who acts (the caller's verified email); Reason why. Both are required and
	// kept in the run's history.
	Actor  string
	Reason string
	// Attempt, when not zero, fences the action: it happens only if the run is still at
	// this attempt (the one the operator looked at), else ErrConflict.
	Attempt int64
	// PickupTimeout sets the pickup deadline of a run a retry or release queues. Zero
	// means DefaultPickupTimeout.
	PickupTimeout time.Duration
	Retention     time.Duration
	Now           time.Time
}

// ResolveEffectParams are the parameters of an operator's verdict on an uncertain
// effect (Ledger.ResolveEffect). OperatorParams name the run and fence the action as
// for the other operator actions.
type ResolveEffectParams struct {
	OperatorParams
	// Effect is the effect's name, e.g. "run" or "run/2" (a Google Cloud API target's
	// start tries, ledger.StartTry).
	Effect string
	// Done is the verdict: true, the effect happened (the execution started; Ref names
	// it); false, it did not, and the next attempt does it afresh under the same key.
	Done bool
	// Ref, required with Done and refused without, is recorded as the effect's Ref (at
	// most MaxEffectRef bytes): for a start, the execution's name, which the next attempt
	// follows (a start marked done without one would read as one the API refused, see
	// ledger.StartTry, and start again).
	Ref string
}

// ListParams select a page of runs. Zero fields do not filter.
type ListParams struct {
	Status    Status
	Job       string
	Namespace string
	// CreatedAfter ≤ CreatedAt < CreatedBefore.
	CreatedAfter, CreatedBefore time.Time
	// UpdatedAfter ≤ UpdatedAt < UpdatedBefore. When either is set, the runs are ordered
	// by UpdatedAt (newest first) instead of CreatedAt, and no created bound may be set.
	UpdatedAfter, UpdatedBefore time.Time
	// PageSize bounds the page: zero means DefaultPageSize; at most MaxPageSize.
	PageSize int
	// Cursor continues a listing: ListResult.Next of the previous page, with the same
	// filters.
	Cursor string
}

// ListResult is a page of runs.
type ListResult struct {
	Runs []*Run
	// Next is the cursor of the next page; empty on the last one.
	Next string
}

// ListRunIDsParams select the runs whose ID starts with a prefix.
type ListRunIDsParams struct {
	// Prefix is MinRunIDPrefix to RunIDLen lower-case hex digits (ValidRunIDPrefix).
	Prefix string
	// Limit bounds the answer: zero means DefaultRunIDsLimit; at most MaxPageSize.
	Limit int
}

// DefaultRunIDsLimit is ListRunIDs's limit when none is given.
const DefaultRunIDsLimit = 10

// ListEffectsParams name a run whose effects to list.
type ListEffectsParams struct {
	RunID string
}

// ByUpdated reports whether p orders by UpdatedAt.
func (p *ListParams) ByUpdated() bool {
	return !p.UpdatedAfter.IsZero() || !p.UpdatedBefore.IsZero()
}

// TimeRange is the time a listing with p filters and orders by, as the field every
// backend stores it under ("created_at" or "updated_at"), and that filter's bounds
// (zero: unbounded).
func (p *ListParams) TimeRange() (field string, after, before time.Time) {
	if p.ByUpdated() {
		return "updated_at", p.UpdatedAfter, p.UpdatedBefore
	}
	return "created_at", p.CreatedAfter, p.CreatedBefore
}

// SortTime is the time a listing with p orders r by.
func (p *ListParams) SortTime(r *Run) time.Time {
	if p.ByUpdated() {
		return r.UpdatedAt
	}
	return r.CreatedAt
}
