package firestoreledger

import (
	"bytes"
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
//
// The fields marked omitempty are those no query filters or orders on: a new run's
// document (encodeNewRun) leaves each out while it is zero (null, 0 or ""), and
// decoding takes an absent field for its zero. The fields a query reads (status, job,
// namespace, deadline, created_at, updated_at, expire_at, shard) are always written: a
// query does not see a document without its field. Only the creating writes encode a runDoc;
// every later write sets the fields it changes (changes), so a field left out at
// creation stays out until it holds a value.
type runDoc struct {
	Namespace    string     `firestore:"namespace"`
	Job          string     `firestore:"job"`
	Key          string     `firestore:"key"`
	ScheduleTime *time.Time `firestore:"schedule_time,omitempty"`
	PayloadHash  string     `firestore:"payload_hash"`
	Payload      []byte     `firestore:"payload,omitempty"`
	Status       string     `firestore:"status"`
	Attempt      int64      `firestore:"attempt,omitempty"`
	AttemptID    string     `firestore:"attempt_id,omitempty"`
	Deadline     *time.Time `firestore:"deadline"`
	NotBefore    *time.Time `firestore:"not_before,omitempty"`
	AttemptsMade int64      `firestore:"attempts_made,omitempty"`
	LastError    string     `firestore:"last_error,omitempty"`
	Result       []byte     `firestore:"result,omitempty"`
	Progress     []byte     `firestore:"progress,omitempty"`
	CreatedAt    *time.Time `firestore:"created_at"`
	UpdatedAt    *time.Time `firestore:"updated_at"`
	CompletedAt  *time.Time `firestore:"completed_at,omitempty"`
	ExpireAt     *time.Time `firestore:"expire_at"`
	History      string     `firestore:"history"`
	// Shard is ShardOf(the run's ID): every index with a time leads with it.
	Shard int64 `firestore:"shard"`
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
	Shard     int64      `firestore:"shard"`
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

// stampPtr is a time as a runDoc stores it: nil (null) when zero.
func stampPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	m := driver.Micros(t)
	return &m
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
		ShardField:      ShardOf(r.ID),
	}
}

// encodeNewRun returns the document that creates run r: every field but the sparse
// ones (runDoc's omitempty) that are zero. A queued run has eight of them zero: each
// costs Firestore a value to store and index entries to write in every new run's
// commit. A struct, not encodeRun's map: the client converts it with its cached field
// list, and allocates a quarter less than for a map of the same fields.
func encodeNewRun(r *ledger.Run) *runDoc {
	return &runDoc{
		Namespace: r.Namespace, Job: r.Job, Key: r.Key, ScheduleTime: stampPtr(r.ScheduleTime),
		PayloadHash: r.PayloadHash, Payload: r.Payload, Status: string(r.Status),
		Attempt: r.Attempt, AttemptID: r.AttemptID, Deadline: stampPtr(r.Deadline), NotBefore: stampPtr(r.NotBefore),
		AttemptsMade: r.AttemptsMade, LastError: r.LastError, Result: r.Result, Progress: r.Progress,
		CreatedAt: stampPtr(r.CreatedAt), UpdatedAt: stampPtr(r.UpdatedAt), CompletedAt: stampPtr(r.CompletedAt),
		ExpireAt: stampPtr(r.ExpireAt), History: encodeHistory(r.History), Shard: ShardOf(r.ID),
	}
}

// changes is the field-by-field Update that turns the run document was (encodeRun of
// the run as read, or as this ledger last wrote it: the write's update-time
// precondition makes it the document) into next's, in a stable order. It sets only the
// fields whose stored value changes, and updated_at, so that it always writes: no
// transition changes a run's payload (which may be most of the document), its identity
// or its creation time, and none is sent again. A field left out keeps a value that
// decodes as next's, absent (a sparse new run's) included.
func changes(was map[string]any, next *ledger.Run) []firestore.Update {
	m := encodeRun(next)
	for k, v := range m {
		if k != fieldUpdatedAt && sameValue(was[k], v) {
			delete(m, k)
		}
	}
	return updates(m)
}

// sameValue reports whether two of encodeRun's values are stored alike.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y) && (x == nil) == (y == nil)
	}
	return a == b
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
		ShardField:    ShardOf(e.RunID),
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
