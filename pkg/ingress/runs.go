package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/ledger"
)

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

// runEffect is worker.RunEffect, the effect a target's start is recorded under.
const runEffect = "run"

// readyz answers 200 when the ledger and the topic answer, 503 naming what does not.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var lerr, perr error
	wg.Go(func() { lerr = h.cfg.Ledger.Ping(ctx) })
	wg.Go(func() { perr = h.cfg.Publisher.Ping(ctx) })
	wg.Wait()
	// Unauthenticated: the answer names what is down, never the backend's error text
	// (hosts, database names); the log has it.
	out := map[string]string{"ledger": "ok", "topic": "ok"}
	status := http.StatusOK
	if lerr != nil {
		out["ledger"], status = "unavailable", http.StatusServiceUnavailable
	}
	if perr != nil {
		out["topic"], status = "unavailable", http.StatusServiceUnavailable
	}
	if status != http.StatusOK {
		out["error"] = "not ready: see the ingress's log"
		h.log.WarnContext(ctx, "not ready", "ledger_error", errText(lerr), "topic_error", errText(perr))
	}
	writeJSON(w, status, out)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return obs.Clean(err.Error())
}
