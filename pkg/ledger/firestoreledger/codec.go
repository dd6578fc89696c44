package firestoreledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
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
	fieldPayload   = "payload"
	// fieldHistory is the run's history (ledger.Run.History) as one JSON string: at
	// most ledger.MaxHistory events of bounded text, far inside the 1 MiB document.
	fieldHistory = "history"
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
	Result       []byte     `firestore:"result"`
	Progress     []byte     `firestore:"progress"`
	CreatedAt    *time.Time `firestore:"created_at"`
	UpdatedAt    *time.Time `firestore:"updated_at"`
	CompletedAt  *time.Time `firestore:"completed_at"`
	ExpireAt     *time.Time `firestore:"expire_at"`
	History      string     `firestore:"history"`
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

// nullBytes is a result as stored: nil (null) when empty.
func nullBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// stamp is a time as stored: nil (null) when zero.
func stamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return driver.Micros(t)
}

func unstamp(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return driver.Micros(*t)
}

// encodeHistory is a history as stored: a JSON array, or "" when empty.
func encodeHistory(h []ledger.Event) string {
	if len(h) == 0 {
		return ""
	}
	b, err := json.Marshal(h)
	if err != nil {
		panic(fmt.Sprintf("firestoreledger: encode history: %v", err)) // plain structs of strings, ints and times
	}
	return string(b)
}

// encodeRun returns every field of a run document.
func encodeRun(r *ledger.Run) map[string]any {
	return map[string]any{
		fieldHistory:    encodeHistory(r.History),
		fieldNamespace:  r.Namespace,
		fieldJob:        r.Job,
		"key":           r.Key,
		"schedule_time": stamp(r.ScheduleTime),
		"payload_hash":  r.PayloadHash,
		fieldPayload:    r.Payload,
		fieldStatus:     string(r.Status),
		"attempt":       r.Attempt,
		"attempt_id":    r.AttemptID,
		fieldDeadline:   stamp(r.Deadline),
		"not_before":    stamp(r.NotBefore),
		"attempts_made": r.AttemptsMade,
		"last_error":    r.LastError,
		"result":        nullBytes(r.Result),
		"progress":      nullBytes(r.Progress),
		fieldCreatedAt:  stamp(r.CreatedAt),
		fieldUpdatedAt:  stamp(r.UpdatedAt),
		"completed_at":  stamp(r.CompletedAt),
		fieldExpireAt:   stamp(r.ExpireAt),
	}
}

// sparseFields are the run fields that no query filters or orders on. A new run's
// document (encodeNewRun) leaves each out while it is zero (null, 0 or ""), which
// decodeRun reads back as the zero it stood for; a later Update writes every field.
// The fields a query reads (status, job, namespace, deadline, created_at, updated_at,
// expire_at) are always written: a query does not see a document without its field.
var sparseFields = []string{
	"schedule_time", fieldPayload, "attempt", "attempt_id", "not_before", "attempts_made",
	"last_error", "result", "progress", "completed_at",
}

// encodeNewRun returns the document that creates run r: encodeRun's fields but the
// sparse ones that are zero. A queued run has eight of them zero: each costs Firestore
// a value to store and index entries to write in every new run's commit.
func encodeNewRun(r *ledger.Run) map[string]any {
	m := encodeRun(r)
	for _, f := range sparseFields {
		switch v := m[f].(type) {
		case nil:
			delete(m, f)
		case []byte:
			if v == nil {
				delete(m, f)
			}
		case int64:
			if v == 0 {
				delete(m, f)
			}
		case string:
			if v == "" {
				delete(m, f)
			}
		}
	}
	return m
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
		AttemptsMade: d.AttemptsMade, LastError: d.LastError, Result: nullBytes(d.Result), Progress: nullBytes(d.Progress),
		CreatedAt: unstamp(d.CreatedAt), UpdatedAt: unstamp(d.UpdatedAt),
		CompletedAt: unstamp(d.CompletedAt), ExpireAt: unstamp(d.ExpireAt),
	}
	if d.History != "" {
		if err := json.Unmarshal([]byte(d.History), &r.History); err != nil {
			return nil, fmt.Errorf("firestoreledger: decode run %s: history: %w", s.Ref.ID, err)
		}
	}
	// A document an earlier release's ingress claim created, and nothing rewrote
	// since, carries its times as the document's create time.
	if r.CreatedAt.IsZero() {
		r.CreatedAt = driver.Micros(s.CreateTime)
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
