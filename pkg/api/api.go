// Package api holds the JSON types of the ingress's HTTP API: the answer to POST
// /v1/jobs/{job}, and the operators' API (GET /v1/runs, GET /v1/runs/{run_id}, POST
// /v1/runs/{run_id}:{action}). The ingress (pkg/ingress) writes them and the client
// (pkg/client) and the CLI read them; the package links only the standard library,
// pkg/ledger and a text cleaner for its error messages, so that a program calling the
// API does not link the server.
package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/ledger"
)

// Response is the JSON body of an answer to POST /v1/jobs/{job}.
type Response struct {
	RunID     string        `json:"run_id,omitempty"`
	Status    ledger.Status `json:"status,omitempty"`
	Duplicate bool          `json:"duplicate,omitempty"`
	// Key is the key of a run started by hand (POST /v1/jobs/{job}:run): the one given,
	// or the one made for it.
	Key string `json:"key,omitempty"`
	// Result is a completed run's stored result (worker.SetResult), replayed to every
	// duplicate of it, never recomputed.
	Result json.RawMessage `json:"result,omitempty"`
	// LastError is a failed run's final error, answered to a duplicate of it when the
	// caller is an operator (Config.Operators): an error may carry what the job's target
	// answered.
	LastError string `json:"last_error,omitempty"`
	// Error names the problem of a refused request (4xx, 5xx).
	Error string `json:"error,omitempty"`
}

// Action is an operator's action on a run, as spelled after the colon of POST
// /v1/runs/{run_id}:{action}.
type Action string

// Actions on a run.
const (
	ActionRetry   Action = "retry"
	ActionCancel  Action = "cancel"
	ActionRelease Action = "release"
	// ActionResolve settles an uncertain effect of a failed run (ResolveRequest) and
	// queues the run again.
	ActionResolve Action = "resolve"
)

// Actions returns the actions, in the order the API documents them.
func Actions() []Action { return []Action{ActionRetry, ActionCancel, ActionRelease, ActionResolve} }

// Valid reports whether a is one of the actions.
func (a Action) Valid() bool { return slices.Contains(Actions(), a) }

// The outcomes of ResolveRequest.
const (
	// OutcomeDone: the effect happened (a start: the execution exists, Ref names it).
	OutcomeDone = "done"
	// OutcomeNotDone: the effect did not happen; the next attempt does it under the
	// same key.
	OutcomeNotDone = "not_done"
)

// MaxDetailPayload bounds the payload GET /v1/runs/{run_id}?view=full shows.
const MaxDetailPayload = 64 << 10

// EffectJSON is the JSON form of an effect record.
type EffectJSON struct {
	Name    string              `json:"name"`
	Key     string              `json:"key"`
	Status  ledger.EffectStatus `json:"status"`
	Attempt int64               `json:"attempt"`
	Ref     string              `json:"ref,omitempty"`
	Created time.Time           `json:"created_at"`
	DoneAt  time.Time           `json:"done_at,omitzero"`
}

// PayloadJSON is a run's payload as the full view shows it: as text when it is UTF-8,
// else in base64, cut to MaxDetailPayload bytes.
type PayloadJSON struct {
	Text      string `json:"text,omitempty"`
	Base64    string `json:"base64,omitempty"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

// RunDetailJSON is GET /v1/runs/{run_id}: the record, its history folded into attempts,
// its effects, and (view=full, operators only) its payload.
type RunDetailJSON struct {
	*RunJSON
	Attempts []ledger.AttemptSummary `json:"attempts,omitempty"`
	History  []ledger.Event          `json:"history,omitempty"`
	Effects  []EffectJSON            `json:"effects,omitempty"`
	Payload  *PayloadJSON            `json:"payload,omitempty"`
}

// HideErrors leaves out the run's errors, as the answer to a caller who is not an
// operator: its last error, the texts of its history's events that no operator wrote
// (an attempt's error) and the attempts' errors folded from them. An operator's reason
// stays.
func (d *RunDetailJSON) HideErrors() {
	d.RunJSON.HideErrors()
	hist := make([]ledger.Event, len(d.History))
	for i, e := range d.History {
		if e.Text != "" && e.Actor == "" {
			e.Text, d.ErrorsHidden = "", true
		}
		hist[i] = e
	}
	d.History, d.Attempts = hist, ledger.Attempts(hist)
}

// ListJSON is GET /v1/runs: a page of runs (never their payloads).
type ListJSON struct {
	Runs          []*RunJSON `json:"runs"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}

// ActionJSON is the answer of an action: the run as it now is, and whether it was
// republished (retry and release queue it again).
type ActionJSON struct {
	*RunJSON
	Republished *bool  `json:"republished,omitempty"`
	Warning     string `json:"warning,omitempty"`
}

// AmbiguousJSON is the 409 answer of GET /v1/runs/{prefix} when more than one run's ID
// starts with the prefix: the first ledger.MaxCandidates of them.
type AmbiguousJSON struct {
	Error      string   `json:"error"`
	Candidates []string `json:"candidates"`
	// More is true when other runs start with the prefix too.
	More bool `json:"more,omitempty"`
}

// ActionRequest is the body of an action.
type ActionRequest struct {
	// Reason is why the operator acts; required, kept in the run's history.
	Reason string `json:"reason"`
	// Attempt, when set, makes the action happen only if the run is still at that
	// attempt (the one the operator looked at); 409 otherwise.
	Attempt int64 `json:"attempt,omitempty"`
}

// NewPayloadJSON shows a payload, bounded to MaxDetailPayload bytes.
func NewPayloadJSON(b []byte) *PayloadJSON {
	p := &PayloadJSON{Bytes: len(b)}
	if len(b) > MaxDetailPayload {
		b, p.Truncated = b[:MaxDetailPayload], true
	}
	if utf8.Valid(b) || p.Truncated && utf8.Valid(trimPartialRune(b)) {
		p.Text = string(trimPartialRune(b))
	} else {
		p.Base64 = base64.StdEncoding.EncodeToString(b)
	}
	return p
}

func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// RunJSON is the JSON form of a run record, in GET /v1/runs and GET /v1/runs/{run_id}
// (RunDetailJSON adds the history, the effects and, to operators, the payload): never
// the payload itself, only its hash.
type RunJSON struct {
	RunID        string        `json:"run_id"`
	Namespace    string        `json:"namespace"`
	Job          string        `json:"job"`
	Key          string        `json:"key"`
	ScheduleTime time.Time     `json:"schedule_time,omitzero"`
	Status       ledger.Status `json:"status"`
	Attempt      int64         `json:"attempt"`
	AttemptsMade int64         `json:"attempts_made"`
	Deadline     time.Time     `json:"deadline,omitzero"`
	NotBefore    time.Time     `json:"not_before,omitzero"`
	PayloadHash  string        `json:"payload_hash"`
	LastError    string        `json:"last_error,omitempty"`
	CreatedAt    time.Time     `json:"created_at"`
	UpdatedAt    time.Time     `json:"updated_at"`
	// FinishedAt is when the run became completed, failed or cancelled.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	ExpireAt   time.Time `json:"expire_at"`
	// Result is what the completed attempt returned (worker.SetResult), as stored.
	Result json.RawMessage `json:"result,omitempty"`
	// Progress is how far the run's work has got as its latest attempt last wrote it (a
	// batch's done, failed and total items: worker.Batch).
	Progress json.RawMessage `json:"progress,omitempty"`
	// Execution names what a Google Cloud API target started for the run (a Workflows
	// execution, a Cloud Run execution, a build), once recorded.
	Execution string `json:"execution,omitempty"`
	// ErrorsHidden says that the run's errors (LastError, and the attempts' and the
	// history's texts) were left out: only operators see them (HideErrors).
	ErrorsHidden bool `json:"errors_hidden,omitempty"`
}

// HideErrors leaves out the run's last error, as the answer to a caller who is not an
// operator: an error may carry what the job's target answered (an HTTP target's body)
// or called (its URL), which is for operators, like the payload.
func (r *RunJSON) HideErrors() {
	if r.LastError != "" {
		r.LastError, r.ErrorsHidden = "", true
	}
}

// NewRunJSON returns the JSON form of r.
func NewRunJSON(r *ledger.Run) *RunJSON {
	return &RunJSON{
		RunID: r.ID, Namespace: r.Namespace, Job: r.Job, Key: r.Key, ScheduleTime: r.ScheduleTime,
		Status: r.Status, Attempt: r.Attempt, AttemptsMade: r.AttemptsMade,
		Deadline: r.Deadline, NotBefore: r.NotBefore, PayloadHash: r.PayloadHash, LastError: r.LastError,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.CompletedAt, ExpireAt: r.ExpireAt,
		Result: r.Result, Progress: r.Progress,
	}
}

// StatusError is the run's last error where it explains the run's status: a failed
// run's final error, or a queued run's error of the attempt before it (released for a
// retry, released by an operator, or failed and retried). A completed, running or
// cancelled run's last error is an earlier attempt's: StatusError is empty for it, and
// the error stays in the run's attempts and history (and LastError).
func (r *RunJSON) StatusError() string {
	switch r.Status {
	case ledger.StatusFailed:
		return r.LastError
	case ledger.StatusQueued:
		if r.Attempt > 0 {
			return r.LastError
		}
	}
	return ""
}

// ResolveRequest is the body of :resolve: the operator's verdict on an effect a failed
// run left uncertain (begun by an attempt that never marked it done: a start whose
// answer was lost, an AtMostOnce effect cut short).
type ResolveRequest struct {
	// Effect is the effect's name, as GET /v1/runs/{run_id} lists it ("run", "run/2").
	Effect string `json:"effect"`
	// Outcome is OutcomeDone or OutcomeNotDone.
	Outcome string `json:"outcome"`
	// Ref, only with OutcomeDone, is what the effect made (at most ledger.MaxEffectRef
	// bytes): for a Google Cloud API target's start, the execution's name, which the
	// next attempt then follows.
	Ref string `json:"ref,omitempty"`
	// Reason and Attempt are as for the other actions.
	Reason  string `json:"reason"`
	Attempt int64  `json:"attempt,omitempty"`
}

// Check refuses a resolution that names no effect, an outcome other than done or
// not_done, a ref with not_done or a ref over ledger.MaxEffectRef, no reason, or done
// without a ref, naming the field.
func (q *ResolveRequest) Check() error {
	switch {
	case strings.TrimSpace(q.Effect) == "":
		return errors.New(`resolve needs the effect: {"effect": "run", …}; GET /v1/runs/{run_id} lists the run's effects`)
	case q.Outcome != OutcomeDone && q.Outcome != OutcomeNotDone:
		return fmt.Errorf(`outcome %s is not %q (it happened) or %q (it did not: do it again)`, quoted(q.Outcome), OutcomeDone, OutcomeNotDone)
	case q.Ref != "" && q.Outcome != OutcomeDone:
		return fmt.Errorf(`ref names what the effect made: give it only with "outcome": %q`, OutcomeDone)
	case len(q.Ref) > ledger.MaxEffectRef:
		return fmt.Errorf("ref is %d bytes; the limit is %d", len(q.Ref), ledger.MaxEffectRef)
	case strings.TrimSpace(q.Reason) == "":
		return errors.New(`resolve needs a reason: {"reason": "why"}`)
	case q.Outcome == OutcomeDone && strings.TrimSpace(q.Ref) == "":
		return errors.New(`resolving an effect as done needs its ref, what it made: {"ref": "…"} (a start: the execution's full name, which the next attempt follows)`)
	}
	return nil
}

// quoted returns v escaped by cleantext.Clean between double quotes, for error messages.
func quoted(v string) string { return `"` + cleantext.Clean(v) + `"` }
