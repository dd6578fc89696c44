package spannerledger

import (
	"bytes"
	"encoding/json"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// runColumns are the runs table's columns in the order runRow and runValues use.
var runColumns = []string{"run_id", "namespace", "job", "run_key", "schedule_time", "payload_hash", "payload",
	"status", "attempt", "attempt_id", "deadline", "not_before", "attempts_made", "last_error",
	"created_at", "updated_at", "completed_at", "expire_at", "history", "result", "progress"}

var effectColumns = []string{"run_id", "name", "effect_key", "status", "attempt", "created_at", "updated_at",
	"done_at", "expire_at", "ref"}

// runRow is a run as a query returns it: every column nullable, since reads LEFT JOIN the
// record to a one-row table to return Spanner's time beside a record that may be absent.
type runRow struct {
	RunID        spanner.NullString `spanner:"run_id"`
	Namespace    spanner.NullString `spanner:"namespace"`
	Job          spanner.NullString `spanner:"job"`
	Key          spanner.NullString `spanner:"run_key"`
	ScheduleTime spanner.NullTime   `spanner:"schedule_time"`
	PayloadHash  spanner.NullString `spanner:"payload_hash"`
	Payload      []byte             `spanner:"payload"`
	Status       spanner.NullString `spanner:"status"`
	Attempt      spanner.NullInt64  `spanner:"attempt"`
	AttemptID    spanner.NullString `spanner:"attempt_id"`
	Deadline     spanner.NullTime   `spanner:"deadline"`
	NotBefore    spanner.NullTime   `spanner:"not_before"`
	AttemptsMade spanner.NullInt64  `spanner:"attempts_made"`
	LastError    spanner.NullString `spanner:"last_error"`
	CreatedAt    spanner.NullTime   `spanner:"created_at"`
	UpdatedAt    spanner.NullTime   `spanner:"updated_at"`
	CompletedAt  spanner.NullTime   `spanner:"completed_at"`
	ExpireAt     spanner.NullTime   `spanner:"expire_at"`
	History      spanner.NullString `spanner:"history"`
	Result       []byte             `spanner:"result"`
	Progress     []byte             `spanner:"progress"`
}

type effectRow struct {
	RunID     spanner.NullString `spanner:"run_id"`
	Name      spanner.NullString `spanner:"name"`
	Key       spanner.NullString `spanner:"effect_key"`
	Status    spanner.NullString `spanner:"status"`
	Attempt   spanner.NullInt64  `spanner:"attempt"`
	CreatedAt spanner.NullTime   `spanner:"created_at"`
	UpdatedAt spanner.NullTime   `spanner:"updated_at"`
	DoneAt    spanner.NullTime   `spanner:"done_at"`
	ExpireAt  spanner.NullTime   `spanner:"expire_at"`
	Ref       spanner.NullString `spanner:"ref"`
}

// tm returns a stored time as the ledger's: UTC, microseconds (a commit timestamp has
// nanoseconds).
func tm(t spanner.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return driver.Micros(t.Time)
}

func (r *runRow) run() *ledger.Run {
	if !r.RunID.Valid {
		return nil
	}
	var h []ledger.Event
	if r.History.Valid && r.History.StringVal != "" {
		// Written by encodeHistory; a row that does not decode keeps an empty history
		// rather than making its run unreadable.
		_ = json.Unmarshal([]byte(r.History.StringVal), &h)
	}
	return &ledger.Run{
		History: h,
		ID:      r.RunID.StringVal, Namespace: r.Namespace.StringVal, Job: r.Job.StringVal, Key: r.Key.StringVal,
		ScheduleTime: tm(r.ScheduleTime), PayloadHash: r.PayloadHash.StringVal, Payload: r.Payload,
		Status: ledger.Status(r.Status.StringVal), Attempt: r.Attempt.Int64, AttemptID: r.AttemptID.StringVal,
		Deadline: tm(r.Deadline), NotBefore: tm(r.NotBefore), AttemptsMade: r.AttemptsMade.Int64,
		LastError: r.LastError.StringVal, CreatedAt: tm(r.CreatedAt), UpdatedAt: tm(r.UpdatedAt),
		CompletedAt: tm(r.CompletedAt), ExpireAt: tm(r.ExpireAt), Result: nullBytes(r.Result), Progress: nullBytes(r.Progress),
	}
}

func (e *effectRow) effect() *ledger.Effect {
	if !e.RunID.Valid {
		return nil
	}
	return &ledger.Effect{
		Key: e.Key.StringVal, RunID: e.RunID.StringVal, Name: e.Name.StringVal, Status: ledger.EffectStatus(e.Status.StringVal),
		Attempt: e.Attempt.Int64, CreatedAt: tm(e.CreatedAt), UpdatedAt: tm(e.UpdatedAt), DoneAt: tm(e.DoneAt),
		ExpireAt: tm(e.ExpireAt), Ref: e.Ref.StringVal,
	}
}

// nullTime is a time as a column value: NULL for zero.
func nullTime(t time.Time) spanner.NullTime {
	return spanner.NullTime{Time: t, Valid: !t.IsZero()}
}

func runValues(r *ledger.Run) []any {
	return []any{r.ID, r.Namespace, r.Job, r.Key, nullTime(r.ScheduleTime), r.PayloadHash, r.Payload,
		string(r.Status), r.Attempt, r.AttemptID, nullTime(r.Deadline), nullTime(r.NotBefore), r.AttemptsMade,
		r.LastError, r.CreatedAt, r.UpdatedAt, nullTime(r.CompletedAt), r.ExpireAt, encodeHistory(r.History),
		nullBytes(r.Result), nullBytes(r.Progress)}
}

// sameValue reports whether two of runValues' values are stored alike.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case spanner.NullTime:
		y, ok := b.(spanner.NullTime)
		return ok && x.Valid == y.Valid && x.Time.Equal(y.Time)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y) && (x == nil) == (y == nil)
	}
	return a == b
}

// encodeHistory is a history as stored: a JSON array, or NULL when empty.
func encodeHistory(h []ledger.Event) spanner.NullString {
	if len(h) == 0 {
		return spanner.NullString{}
	}
	b, err := json.Marshal(h)
	if err != nil { // plain structs of strings, integers and times
		return spanner.NullString{}
	}
	return spanner.NullString{StringVal: string(b), Valid: true}
}

// nullBytes is a result as a column value: NULL when empty.
func nullBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func effectValues(e *ledger.Effect) []any {
	return []any{e.RunID, e.Name, e.Key, string(e.Status), e.Attempt, e.CreatedAt, e.UpdatedAt,
		nullTime(e.DoneAt), e.ExpireAt, e.Ref}
}

// selectRun is the select list of a run under the alias r.
const selectRun = `r.run_id, r.namespace, r.job, r.run_key, r.schedule_time, r.payload_hash, r.payload,
	r.status, r.attempt, r.attempt_id, r.deadline, r.not_before, r.attempts_made, r.last_error,
	r.created_at, r.updated_at, r.completed_at, r.expire_at, r.history, r.result, r.progress`

// selectListed is the select list of a listed run: neither its payload nor its history.
const selectListed = `r.run_id, r.namespace, r.job, r.run_key, r.schedule_time, r.payload_hash,
	r.status, r.attempt, r.attempt_id, r.deadline, r.not_before, r.attempts_made, r.last_error,
	r.created_at, r.updated_at, r.completed_at, r.expire_at, r.result, r.progress`

const selectEffect = `e.run_id, e.name, e.effect_key, e.status, e.attempt, e.created_at,
	e.updated_at, e.done_at, e.expire_at, e.ref`
