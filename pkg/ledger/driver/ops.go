package driver

import (
	"cmp"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runonce/runonce/pkg/ledger"
)

// This file holds the rules of the operators' side of the ledger: the history a
// transition adds to its run, the operator transitions (retry, cancel, release, and
// resolving an uncertain effect), and the listing's cursor and filters.

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
	OpResolveEffect   Op = "resolve_effect"
)

// Note is what a transition's parameters add to its events.
type Note struct {
	Worker string
	Actor  string
	Reason string
	// Effect, Done and Ref are an effect's resolution (OpResolveEffect).
	Effect string
	Done   bool
	Ref    string
}

// resolutionText is the text of an effect's resolution event: the effect, the verdict,
// the reason, then the ref (clipped first when the whole is too long).
func resolutionText(n Note) string {
	if !n.Done {
		return fmt.Sprintf("effect %q did not happen, to be done again: %s", n.Effect, n.Reason)
	}
	if n.Ref == "" {
		return fmt.Sprintf("effect %q happened: %s", n.Effect, n.Reason)
	}
	return fmt.Sprintf("effect %q happened: %s (ref %s)", n.Effect, n.Reason, n.Ref)
}

// Record returns the events a transition from cur to next (the record a backend is
// about to write; nil when it writes nothing) adds to the run's history. Renewals and
// expedites add none.
func Record(op Op, cur, next *ledger.Run, now time.Time, n Note) []ledger.Event {
	if next == nil {
		return nil
	}
	now = Micros(now)
	ev := func(k ledger.EventKind, attempt int64, text string) ledger.Event {
		return ledger.Event{At: now, Kind: k, Attempt: attempt, Text: ClipText(text)}
	}
	switch op {
	case OpClaim:
		return []ledger.Event{ev(ledger.EventClaimed, 0, "")}
	case OpAcquire:
		var out []ledger.Event
		if cur != nil && cur.Status == ledger.StatusRunning {
			out = append(out, ev(ledger.EventLeaseLost, cur.Attempt, next.LastError))
		}
		s := ev(ledger.EventStarted, next.Attempt, "")
		s.Worker = ClipText(n.Worker)
		return append(out, s)
	case OpComplete:
		return []ledger.Event{ev(ledger.EventCompleted, next.Attempt, "")}
	case OpFail:
		return []ledger.Event{ev(ledger.EventFailed, next.Attempt, next.LastError)}
	case OpRelease:
		return []ledger.Event{ev(ledger.EventReleased, next.Attempt, next.LastError)}
	case OpRescue:
		if cur != nil && cur.Status == ledger.StatusRunning {
			return []ledger.Event{ev(ledger.EventLeaseLost, cur.Attempt, next.LastError)}
		}
		return []ledger.Event{ev(ledger.EventRescued, next.Attempt, "")}
	case OpRetry, OpCancel, OpOperatorRelease:
		k := map[Op]ledger.EventKind{OpRetry: ledger.EventRetried, OpCancel: ledger.EventCancelled, OpOperatorRelease: ledger.EventOperatorReleased}[op]
		e := ev(k, next.Attempt, n.Reason)
		e.Actor = ClipText(n.Actor)
		return []ledger.Event{e}
	case OpResolveEffect:
		e := ev(ledger.EventEffectResolved, next.Attempt, resolutionText(n))
		e.Actor = ClipText(n.Actor)
		return []ledger.Event{e}
	}
	return nil
}

// record adds the events of a transition from cur to next to next's history (next is
// the record about to be written; nil when nothing is). Every Apply function that
// changes a run's state calls it on its way out, so that a backend built on them keeps
// the history without a line of its own.
func record(next, cur *ledger.Run, op Op, now time.Time, n Note) {
	if next == nil {
		return
	}
	var h []ledger.Event
	if cur != nil {
		h = cur.History
	}
	next.History = AppendHistory(h, Record(op, cur, next, now, n)...)
}

// AppendHistory returns h with evs appended, keeping the latest ledger.MaxHistory. An
// event is never dated before the one it follows: a backend whose one-RPC writes stamp
// an estimate of the server's clock (the Firestore and Spanner claims, Firestore's
// holder writes) may have dated one a little ahead of the server's own time (at most
// the estimate's error, milliseconds), and the next, decided at the server's time,
// then takes that date.
func AppendHistory(h []ledger.Event, evs ...ledger.Event) []ledger.Event {
	if len(evs) == 0 {
		return h
	}
	out := append(append(make([]ledger.Event, 0, len(h)+len(evs)), h...), evs...)
	for i := max(len(h), 1); i < len(out); i++ {
		if out[i].At.Before(out[i-1].At) {
			out[i].At = out[i-1].At
		}
	}
	if len(out) > ledger.MaxHistory {
		out = out[len(out)-ledger.MaxHistory:]
	}
	return out
}

// ClipText bounds s to ledger.MaxEventText bytes, on a rune boundary.
func ClipText(s string) string {
	if len(s) <= ledger.MaxEventText {
		return s
	}
	cut := ledger.MaxEventText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func operatorGuard(cur *ledger.Run, p *ledger.OperatorParams, action string, from ...ledger.Status) error {
	if cur == nil {
		return fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	if p.Attempt != 0 && cur.Attempt != p.Attempt {
		return fmt.Errorf("%w: run %s is at attempt %d, not %d: look at it again", ledger.ErrConflict, p.RunID, cur.Attempt, p.Attempt)
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
	return fmt.Errorf("%w: run %s is %s; only a %s run can be %s", ledger.ErrWrongStatus, p.RunID, cur.Status, strings.Join(names, " or "), action)
}

// ApplyRetry returns a failed run to queued with a fresh attempt budget.
func ApplyRetry(cur *ledger.Run, p *ledger.OperatorParams, now time.Time) (next *ledger.Run, err error) {
	defer func() { record(next, cur, OpRetry, now, Note{Actor: p.Actor, Reason: p.Reason}) }()
	now = Micros(now)
	if err := operatorGuard(cur, p, "retried", ledger.StatusFailed); err != nil {
		return nil, err
	}
	return requeue(cur, p, now), nil
}

// requeue is a retry's record: the failed run cur queued again at now with a fresh
// attempt budget and pickup deadline.
func requeue(cur *ledger.Run, p *ledger.OperatorParams, now time.Time) *ledger.Run {
	r := *cur
	r.Status = ledger.StatusQueued
	r.AttemptsMade = 0
	r.AttemptID = ""
	r.NotBefore = time.Time{}
	r.CompletedAt = time.Time{}
	r.Deadline = Micros(now.Add(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r
}

// ApplyResolveEffect settles the pending effect cur of the failed run run with an
// operator's verdict (see ledger.Driver.ResolveEffect): it returns the run queued
// again as ApplyRetry queues it, with the resolution in its history, and the effect
// done with p.Ref (p.Done) or pending as if never begun (attempt 0). A backend writes
// both records in one atomic write.
func ApplyResolveEffect(run *ledger.Run, cur *ledger.Effect, p *ledger.ResolveEffectParams, now time.Time) (nextRun *ledger.Run, next *ledger.Effect, err error) {
	defer func() {
		record(nextRun, run, OpResolveEffect, now, Note{Actor: p.Actor, Reason: p.Reason, Effect: p.Effect, Done: p.Done, Ref: p.Ref})
	}()
	now = Micros(now)
	if err := operatorGuard(run, &p.OperatorParams, "resolved", ledger.StatusFailed); err != nil {
		return nil, nil, err
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("%w: run %s has no effect %q", ledger.ErrNotFound, p.RunID, p.Effect)
	}
	if cur.Status != ledger.EffectPending {
		return nil, nil, fmt.Errorf("%w: effect %q of run %s is already %s (by attempt %d): nothing is uncertain about it",
			ledger.ErrWrongStatus, p.Effect, p.RunID, cur.Status, cur.Attempt)
	}
	e := *cur
	if p.Done {
		e.Status, e.Ref, e.DoneAt = ledger.EffectDone, p.Ref, now
	} else {
		e.Attempt, e.Ref, e.DoneAt = 0, "", time.Time{}
	}
	e.UpdatedAt = now
	e.ExpireAt = Micros(now.Add(retention(p.Retention)))
	return requeue(run, &p.OperatorParams, now), &e, nil
}

// Action is an operator's transition as a backend that decides it in a transaction of
// its own applies it (PostgreSQL, Redis): the run and the effect it reads and writes,
// the note its events take (Record), and its rule.
type Action struct {
	Op     Op
	Params *ledger.OperatorParams
	// Effect is the name of the run's effect the action reads and writes too; "" for
	// none (Apply then gets a nil effect and returns none).
	Effect string
	Note   Note
	Apply  func(run *ledger.Run, eff *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)
}

// RunAction is the action of rule, a transition of the run alone (ApplyRetry,
// ApplyCancel, ApplyOperatorRelease).
func RunAction(op Op, p *ledger.OperatorParams, rule func(*ledger.Run, *ledger.OperatorParams, time.Time) (*ledger.Run, error)) *Action {
	return &Action{Op: op, Params: p, Note: Note{Actor: p.Actor, Reason: p.Reason},
		Apply: func(run *ledger.Run, _ *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error) {
			next, err := rule(run, p, now)
			return next, nil, err
		}}
}

// ResolveAction is the action of an effect's resolution (ApplyResolveEffect).
func ResolveAction(p *ledger.ResolveEffectParams) *Action {
	return &Action{Op: OpResolveEffect, Params: &p.OperatorParams, Effect: p.Effect,
		Note: Note{Actor: p.Actor, Reason: p.Reason, Effect: p.Effect, Done: p.Done, Ref: p.Ref},
		Apply: func(run *ledger.Run, eff *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error) {
			return ApplyResolveEffect(run, eff, p, now)
		}}
}

// ApplyCancel makes a queued or running run cancelled.
func ApplyCancel(cur *ledger.Run, p *ledger.OperatorParams, now time.Time) (next *ledger.Run, err error) {
	defer func() { record(next, cur, OpCancel, now, Note{Actor: p.Actor, Reason: p.Reason}) }()
	now = Micros(now)
	if err := operatorGuard(cur, p, "cancelled", ledger.StatusQueued, ledger.StatusRunning); err != nil {
		return nil, err
	}
	r := *cur
	r.Status = ledger.StatusCancelled
	r.Deadline = time.Time{}
	r.NotBefore = time.Time{}
	r.CompletedAt = now
	touch(&r, now, p.Retention)
	return &r, nil
}

// ApplyOperatorRelease ends the lease of a running run now and queues it again.
func ApplyOperatorRelease(cur *ledger.Run, p *ledger.OperatorParams, now time.Time) (next *ledger.Run, err error) {
	defer func() { record(next, cur, OpOperatorRelease, now, Note{Actor: p.Actor, Reason: p.Reason}) }()
	now = Micros(now)
	if err := operatorGuard(cur, p, "released", ledger.StatusRunning); err != nil {
		return nil, err
	}
	r := *cur
	r.Status = ledger.StatusQueued
	r.AttemptsMade++
	r.LastError = ClipText(fmt.Sprintf("attempt %d released by %s: %s", cur.Attempt, p.Actor, p.Reason))
	r.AttemptID = ""
	r.NotBefore = time.Time{}
	r.Deadline = Micros(now.Add(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)))
	touch(&r, now, p.Retention)
	return &r, nil
}

// RunIDScan returns the limit of ListRunIDs's p (ledger.Ledger checked it) and the range
// of IDs it scans (ledger.RunIDRange), lo inclusive, hi exclusive.
func RunIDScan(p *ledger.ListRunIDsParams) (limit int, lo, hi string) {
	lo, hi = ledger.RunIDRange(p.Prefix)
	return cmp.Or(p.Limit, ledger.DefaultRunIDsLimit), lo, hi
}

// Position is where a listing stands (ledger.Position).
type Position = ledger.Position

// ListPage returns the page size of a listing's p (ledger.Ledger checked it) and the
// position its cursor continues after (zero for the first page).
func ListPage(p *ledger.ListParams) (int, Position) {
	size := cmp.Or(p.PageSize, ledger.DefaultPageSize)
	if p.Cursor == "" {
		return size, Position{}
	}
	pos, _ := ledger.DecodeCursor(p.Cursor) // sound: the Ledger refused a bad one
	return size, pos
}

// Matches reports whether r passes p's filters and comes after pos (for backends that
// filter in process).
func Matches(p *ledger.ListParams, r *ledger.Run, pos Position) bool {
	switch {
	case p.Status != "" && r.Status != p.Status,
		p.Job != "" && r.Job != p.Job,
		p.Namespace != "" && r.Namespace != p.Namespace,
		!p.CreatedAfter.IsZero() && r.CreatedAt.Before(Micros(p.CreatedAfter)),
		!p.CreatedBefore.IsZero() && !r.CreatedAt.Before(Micros(p.CreatedBefore)),
		!p.UpdatedAfter.IsZero() && r.UpdatedAt.Before(Micros(p.UpdatedAfter)),
		!p.UpdatedBefore.IsZero() && !r.UpdatedAt.Before(Micros(p.UpdatedBefore)):
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
func Page(p *ledger.ListParams, runs []*ledger.Run, size int) *ledger.ListResult {
	if len(runs) <= size {
		return &ledger.ListResult{Runs: runs}
	}
	runs = runs[:size]
	last := runs[len(runs)-1]
	return &ledger.ListResult{Runs: runs, Next: ledger.EncodeCursor(Position{At: p.SortTime(last), RunID: last.ID})}
}
