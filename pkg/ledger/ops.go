package ledger

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds the operators' side of the ledger: listing runs, the history of a
// run, and the three operator transitions (retry, cancel, release), as pure functions
// over records like machine.go's.

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

// Op names a transition, for Record.
type Op string

// The transitions that Record turns into events.
const (
	OpClaim           Op = "claim"
	OpExpedite        Op = "expedite"
	OpAcquire         Op = "acquire"
	OpRenew           Op = "renew"
	OpComplete        Op = "complete"
	OpRelease         Op = "release"
	OpFail            Op = "fail"
	OpRescue          Op = "rescue"
	OpRetry           Op = "retry"
	OpCancel          Op = "cancel"
	OpOperatorRelease Op = "operator_release"
)

// Note is what a transition's parameters add to its events.
type Note struct {
	Worker string
	Actor  string
	Reason string
}

// Record returns the events a transition from cur to next (the record a backend is
// about to write; nil when it writes nothing) adds to the run's history. Renewals and
// expedites add none.
func Record(op Op, cur, next *Run, now time.Time, n Note) []Event {
	if next == nil {
		return nil
	}
	now = Truncate(now)
	ev := func(k EventKind, attempt int64, text string) Event {
		return Event{At: now, Kind: k, Attempt: attempt, Text: ClipText(text)}
	}
	switch op {
	case OpClaim:
		return []Event{ev(EventClaimed, 0, "")}
	case OpAcquire:
		var out []Event
		if cur != nil && cur.Status == StatusRunning {
			out = append(out, ev(EventLeaseLost, cur.Attempt, next.LastError))
		}
		s := ev(EventStarted, next.Attempt, "")
		s.Worker = ClipText(n.Worker)
		return append(out, s)
	case OpComplete:
		return []Event{ev(EventCompleted, next.Attempt, "")}
	case OpFail:
		return []Event{ev(EventFailed, next.Attempt, next.LastError)}
	case OpRelease:
		return []Event{ev(EventReleased, next.Attempt, next.LastError)}
	case OpRescue:
		if cur != nil && cur.Status == StatusRunning {
			return []Event{ev(EventLeaseLost, cur.Attempt, next.LastError)}
		}
		return []Event{ev(EventRescued, next.Attempt, "")}
	case OpRetry, OpCancel, OpOperatorRelease:
		k := map[Op]EventKind{OpRetry: EventRetried, OpCancel: EventCancelled, OpOperatorRelease: EventOperatorReleased}[op]
		e := ev(k, next.Attempt, n.Reason)
		e.Actor = ClipText(n.Actor)
		return []Event{e}
	}
	return nil
}

// AppendHistory returns h with evs appended, keeping the latest MaxHistory.
func AppendHistory(h []Event, evs ...Event) []Event {
	if len(evs) == 0 {
		return h
	}
	out := append(append(make([]Event, 0, len(h)+len(evs)), h...), evs...)
	if len(out) > MaxHistory {
		out = out[len(out)-MaxHistory:]
	}
	return out
}

// ClipText bounds s to MaxEventText bytes, on a rune boundary.
func ClipText(s string) string {
	if len(s) <= MaxEventText {
		return s
	}
	cut := MaxEventText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
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

// ValidateOperator checks an operator action's parameters.
func ValidateOperator(p *OperatorParams) error {
	if !ValidRunID(p.RunID) {
		return Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
	if strings.TrimSpace(p.Actor) == "" {
		return Invalidf("run %s: an operator's action needs the actor", p.RunID)
	}
	if strings.TrimSpace(p.Reason) == "" {
		return Invalidf("run %s: an operator's action needs a reason", p.RunID)
	}
	if len(p.Reason) > MaxReason {
		return Invalidf("run %s: the reason is %d bytes, the limit is %d", p.RunID, len(p.Reason), MaxReason)
	}
	return nil
}

func operatorGuard(cur *Run, p *OperatorParams, action string, from ...Status) error {
	if err := ValidateOperator(p); err != nil {
		return err
	}
	if cur == nil {
		return fmt.Errorf("%w: run %s", ErrNotFound, p.RunID)
	}
	if p.Attempt != 0 && cur.Attempt != p.Attempt {
		return fmt.Errorf("%w: run %s is at attempt %d, not %d: look at it again", ErrConflict, p.RunID, cur.Attempt, p.Attempt)
	}
	for _, s := range from {
		if cur.Status == s {
			return nil
		}
	}
	names := make([]string, len(from))
	for i, s := range from {
		names[i] = string(s)
	}
	return fmt.Errorf("%w: run %s is %s; only a %s run can be %s", ErrWrongStatus, p.RunID, cur.Status, strings.Join(names, " or "), action)
}

// ApplyRetry returns a failed run to queued with a fresh attempt budget.
func ApplyRetry(cur *Run, p *OperatorParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := operatorGuard(cur, p, "retried", StatusFailed); err != nil {
		return nil, err
	}
	r := *cur
	r.Status = StatusQueued
	r.AttemptsMade = 0
	r.AttemptID = ""
	r.NotBefore = time.Time{}
	r.CompletedAt = time.Time{}
	r.Deadline = Truncate(now.Add(cmp.Or(p.PickupTimeout, DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, nil
}

// ApplyCancel makes a queued or running run cancelled.
func ApplyCancel(cur *Run, p *OperatorParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := operatorGuard(cur, p, "cancelled", StatusQueued, StatusRunning); err != nil {
		return nil, err
	}
	r := *cur
	r.Status = StatusCancelled
	r.Deadline = time.Time{}
	r.NotBefore = time.Time{}
	r.CompletedAt = now
	touch(&r, now, p.Retention)
	return &r, nil
}

// ApplyOperatorRelease ends the lease of a running run now and queues it again.
func ApplyOperatorRelease(cur *Run, p *OperatorParams, now time.Time) (*Run, error) {
	now = Truncate(now)
	if err := operatorGuard(cur, p, "released", StatusRunning); err != nil {
		return nil, err
	}
	r := *cur
	r.Status = StatusQueued
	r.AttemptsMade++
	r.LastError = ClipText(fmt.Sprintf("attempt %d released by %s: %s", cur.Attempt, p.Actor, p.Reason))
	r.AttemptID = ""
	r.NotBefore = time.Time{}
	r.Deadline = Truncate(now.Add(cmp.Or(p.PickupTimeout, DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, nil
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

// ListEffectsParams name a run whose effects to list.
type ListEffectsParams struct {
	RunID string
}

// ByUpdated reports whether p orders by UpdatedAt.
func (p *ListParams) ByUpdated() bool {
	return !p.UpdatedAfter.IsZero() || !p.UpdatedBefore.IsZero()
}

// Position is where a listing stands: the sort time and run ID of the last run of a
// page. Runs come in (time, run ID) descending order.
type Position struct {
	At    time.Time
	RunID string
}

// ValidateList checks a listing's parameters and returns its page size and the position
// its cursor continues after (zero for the first page).
func ValidateList(p *ListParams) (int, Position, error) {
	if p.Status != "" && !p.Status.Valid() {
		return 0, Position{}, Invalidf("status %q is not one of queued, running, completed, failed, cancelled", p.Status)
	}
	if p.ByUpdated() && (!p.CreatedAfter.IsZero() || !p.CreatedBefore.IsZero()) {
		return 0, Position{}, Invalidf("filter by creation or by update time, not both")
	}
	if p.PageSize < 0 || p.PageSize > MaxPageSize {
		return 0, Position{}, Invalidf("page size %d is not between 1 and %d", p.PageSize, MaxPageSize)
	}
	size := cmp.Or(p.PageSize, DefaultPageSize)
	if p.Cursor == "" {
		return size, Position{}, nil
	}
	pos, err := decodeCursor(p.Cursor)
	if err != nil {
		return 0, Position{}, Invalidf("cursor %q is not one this ledger made: %v", p.Cursor, err)
	}
	return size, pos, nil
}

// SortTime is the time a listing with p orders r by.
func (p *ListParams) SortTime(r *Run) time.Time {
	if p.ByUpdated() {
		return r.UpdatedAt
	}
	return r.CreatedAt
}

// Matches reports whether r passes p's filters and comes after pos (for backends that
// filter in process).
func (p *ListParams) Matches(r *Run, pos Position) bool {
	switch {
	case p.Status != "" && r.Status != p.Status,
		p.Job != "" && r.Job != p.Job,
		p.Namespace != "" && r.Namespace != p.Namespace,
		!p.CreatedAfter.IsZero() && r.CreatedAt.Before(Truncate(p.CreatedAfter)),
		!p.CreatedBefore.IsZero() && !r.CreatedAt.Before(Truncate(p.CreatedBefore)),
		!p.UpdatedAfter.IsZero() && r.UpdatedAt.Before(Truncate(p.UpdatedAfter)),
		!p.UpdatedBefore.IsZero() && !r.UpdatedAt.Before(Truncate(p.UpdatedBefore)):
		return false
	}
	return pos.RunID == "" || ComparePosition(Position{At: p.SortTime(r), RunID: r.ID}, pos) < 0
}

// ComparePosition orders positions as a listing does, ascending: a listing returns
// them in descending order.
func ComparePosition(a, b Position) int {
	return cmp.Or(a.At.Compare(b.At), strings.Compare(a.RunID, b.RunID))
}

// Page cuts a listing's candidates (already filtered, in descending order, at most
// size+1 of them) to a page and its next cursor.
func Page(p *ListParams, runs []*Run, size int) *ListResult {
	if len(runs) <= size {
		return &ListResult{Runs: runs}
	}
	runs = runs[:size]
	last := runs[len(runs)-1]
	return &ListResult{Runs: runs, Next: EncodeCursor(Position{At: p.SortTime(last), RunID: last.ID})}
}

// EncodeCursor returns the opaque cursor of pos.
func EncodeCursor(pos Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(pos.At.UnixMicro(), 10) + "." + pos.RunID))
}

func decodeCursor(c string) (Position, error) {
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
