package firestoreledger

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/runonce/runonce/pkg/ledger"
)

// Field names of a run document. See the package documentation for the layout.
const (
	fieldStatus    = "status"
	fieldDeadline  = "deadline"
	fieldExpireAt  = "expire_at"
	fieldCreatedAt = "created_at"
	fieldUpdatedAt = "updated_at"
	fieldJob       = "job"
	fieldNamespace = "namespace"
	fieldHistory   = "history"
	fieldRunID     = "run_id"
	// fieldEffectSeq counts effect writes: each bumps it, with the run's update time
	// as a precondition, to fence the effect on the run (see Ledger.effect).
	fieldEffectSeq = "effect_seq"
)

// runDoc is a run document as stored. Times are Timestamps, or null when zero.
type runDoc struct {
	Namespace    string     `firestore:"namespace"`
	Job          string     `firestore:"job"`
	Key          string     `firestore:"key"`
	ScheduleTime *time.Time `firestore:"schedule_time"`
	PayloadHash  string     `firestore:"payload_hash"`
	Payload      []byte     `firestore:"payload"`
	Status       string     `firestore:"status"`
	Attempt      int64      `firestore:"attempt"`
	AttemptID    string     `firestore:"attempt_id"`
	Deadline     *time.Time `firestore:"deadline"`
	NotBefore    *time.Time `firestore:"not_before"`
	AttemptsMade int64      `firestore:"attempts_made"`
	LastError    string     `firestore:"last_error"`
	CreatedAt    *time.Time `firestore:"created_at"`
	UpdatedAt    *time.Time `firestore:"updated_at"`
	CompletedAt  *time.Time `firestore:"completed_at"`
	ExpireAt     *time.Time `firestore:"expire_at"`
	History      []eventDoc `firestore:"history"`
}

// eventDoc is one event of a run's history as stored.
type eventDoc struct {
	At      *time.Time `firestore:"at"`
	Kind    string     `firestore:"kind"`
	Attempt int64      `firestore:"attempt"`
	Worker  string     `firestore:"worker"`
	Actor   string     `firestore:"actor"`
	Text    string     `firestore:"text"`
}

func encodeHistory(h []ledger.Event) []map[string]any {
	out := make([]map[string]any, len(h))
	for i, e := range h {
		out[i] = map[string]any{"at": stamp(e.At), "kind": string(e.Kind), "attempt": e.Attempt, "worker": e.Worker, "actor": e.Actor, "text": e.Text}
	}
	return out
}

// effectDoc is an effect document as stored.
type effectDoc struct {
	RunID     string     `firestore:"run_id"`
	Name      string     `firestore:"name"`
	Status    string     `firestore:"status"`
	Attempt   int64      `firestore:"attempt"`
	Ref       string     `firestore:"ref"`
	CreatedAt *time.Time `firestore:"created_at"`
	UpdatedAt *time.Time `firestore:"updated_at"`
	DoneAt    *time.Time `firestore:"done_at"`
	ExpireAt  *time.Time `firestore:"expire_at"`
}

// stamp is a time as stored: nil (null) when zero.
func stamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ledger.Truncate(t)
}

func unstamp(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return ledger.Truncate(*t)
}

// encodeRun returns every field of a run document.
func encodeRun(r *ledger.Run) map[string]any {
	return map[string]any{
		"namespace":     r.Namespace,
		"job":           r.Job,
		"key":           r.Key,
		"schedule_time": stamp(r.ScheduleTime),
		"payload_hash":  r.PayloadHash,
		"payload":       r.Payload,
		fieldStatus:     string(r.Status),
		"attempt":       r.Attempt,
		"attempt_id":    r.AttemptID,
		fieldDeadline:   stamp(r.Deadline),
		"not_before":    stamp(r.NotBefore),
		"attempts_made": r.AttemptsMade,
		"last_error":    r.LastError,
		fieldCreatedAt:  stamp(r.CreatedAt),
		fieldUpdatedAt:  stamp(r.UpdatedAt),
		"completed_at":  stamp(r.CompletedAt),
		fieldExpireAt:   stamp(r.ExpireAt),
		fieldHistory:    encodeHistory(r.History),
	}
}

// encodeClaim returns the document the ingress claim creates: every field, created_at
// and updated_at being the claim's estimate of the server's time (the one-RPC Create
// cannot read the server's clock), so that listings ordered by them see the run at
// once. (Documents claimed before runonce stored them carry neither: decodeRun takes
// the document's create time.)
func encodeClaim(r *ledger.Run) map[string]any {
	return encodeRun(r)
}

// updates turns a document's fields into a field-by-field Update, in a stable order.
func updates(m map[string]any) []firestore.Update {
	out := make([]firestore.Update, 0, len(m))
	for k, v := range m {
		out = append(out, firestore.Update{Path: k, Value: v})
	}
	slices.SortFunc(out, func(a, b firestore.Update) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// decodeRun reads a run document; nil when it does not exist.
func decodeRun(s *firestore.DocumentSnapshot) (*ledger.Run, error) {
	if s == nil || !s.Exists() {
		return nil, nil
	}
	var d runDoc
	if err := s.DataTo(&d); err != nil {
		return nil, fmt.Errorf("firestoreledger: decode run %s: %w", s.Ref.ID, err)
	}
	r := &ledger.Run{
		ID: s.Ref.ID, Namespace: d.Namespace, Job: d.Job, Key: d.Key,
		ScheduleTime: unstamp(d.ScheduleTime), PayloadHash: d.PayloadHash, Payload: d.Payload,
		Status: ledger.Status(d.Status), Attempt: d.Attempt, AttemptID: d.AttemptID,
		Deadline: unstamp(d.Deadline), NotBefore: unstamp(d.NotBefore),
		AttemptsMade: d.AttemptsMade, LastError: d.LastError,
		CreatedAt: unstamp(d.CreatedAt), UpdatedAt: unstamp(d.UpdatedAt),
		CompletedAt: unstamp(d.CompletedAt), ExpireAt: unstamp(d.ExpireAt),
	}
	for _, e := range d.History {
		r.History = append(r.History, ledger.Event{At: unstamp(e.At), Kind: ledger.EventKind(e.Kind), Attempt: e.Attempt, Worker: e.Worker, Actor: e.Actor, Text: e.Text})
	}
	// A document the ingress claim created and nothing rewrote since carries its
	// times as the document's create time (see encodeClaim).
	if r.CreatedAt.IsZero() {
		r.CreatedAt = ledger.Truncate(s.CreateTime)
	}
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = r.CreatedAt
	}
	if !r.Status.Valid() {
		return nil, fmt.Errorf("firestoreledger: run %s has an unknown status %q", s.Ref.ID, d.Status)
	}
	return r, nil
}

func encodeEffect(e *ledger.Effect) map[string]any {
	return map[string]any{
		"run_id":      e.RunID,
		"name":        e.Name,
		"status":      string(e.Status),
		"attempt":     e.Attempt,
		"ref":         e.Ref,
		"created_at":  stamp(e.CreatedAt),
		"updated_at":  stamp(e.UpdatedAt),
		"done_at":     stamp(e.DoneAt),
		fieldExpireAt: stamp(e.ExpireAt),
	}
}

// decodeEffect reads an effect document; nil when it does not exist.
func decodeEffect(s *firestore.DocumentSnapshot) (*ledger.Effect, error) {
	if s == nil || !s.Exists() {
		return nil, nil
	}
	var d effectDoc
	if err := s.DataTo(&d); err != nil {
		return nil, fmt.Errorf("firestoreledger: decode effect %s: %w", s.Ref.ID, err)
	}
	return &ledger.Effect{
		Key: s.Ref.ID, RunID: d.RunID, Name: d.Name, Status: ledger.EffectStatus(d.Status),
		Attempt: d.Attempt, Ref: d.Ref, CreatedAt: unstamp(d.CreatedAt), UpdatedAt: unstamp(d.UpdatedAt),
		DoneAt: unstamp(d.DoneAt), ExpireAt: unstamp(d.ExpireAt),
	}, nil
}
