package api

import (
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// The operators' job API: GET /v1/jobs/{job}/ticks (the tick audit), POST
// /v1/jobs/{job}:run (run now) and POST /v1/jobs/{job}:backfill.

// Actions on a job, as spelled after the colon.
const (
	JobActionRun      = "run"
	JobActionBackfill = "backfill"
)

// TickJSON is one expected tick of GET /v1/jobs/{job}/ticks.
type TickJSON struct {
	// Tick is the tick's time in UTC, as X-CloudScheduler-ScheduleTime carries it.
	Tick time.Time `json:"tick"`
	// WallTime is its time on the schedule's zone's clock.
	WallTime string `json:"wall_time"`
	// DST is "first" or "second" for the two ticks of a wall time the clocks repeat.
	DST string `json:"dst,omitempty"`
	// Status is the tick's schedule.Status: upcoming, pending, missing, paused, covered,
	// or its run's queued, running, waiting, completed, failed, skipped or cancelled.
	Status string `json:"status"`
	// RunID is the tick's run, when it has one.
	RunID string `json:"run_id,omitempty"`
	// LateSeconds is how long after the tick its run's first delivery arrived.
	LateSeconds float64 `json:"late_seconds,omitempty"`
	// TookSeconds is how long the run has run (to its end, or now while it runs).
	TookSeconds float64 `json:"took_seconds,omitempty"`
	// GraceSeconds is how long after the tick a run could still arrive before the tick
	// counts as missing.
	GraceSeconds float64 `json:"grace_seconds"`
}

// UnmatchedJSON is a run of the job that matched no expected tick, and why
// (schedule.ReasonNoTick, ReasonKeyed, ReasonSecondRun).
type UnmatchedJSON struct {
	RunID        string        `json:"run_id"`
	ScheduleTime time.Time     `json:"schedule_time,omitzero"`
	Status       ledger.Status `json:"status"`
	CreatedAt    time.Time     `json:"created_at"`
	Reason       string        `json:"reason"`
}

// TicksJSON is GET /v1/jobs/{job}/ticks: a page of the job's expected ticks in [from,
// to), oldest first, and the runs of the page's span that matched none.
type TicksJSON struct {
	Job          string `json:"job"`
	Namespace    string `json:"namespace"`
	Schedule     string `json:"schedule"`
	TimeZone     string `json:"time_zone"`
	SchedulerJob string `json:"scheduler_job"`
	// Source is where runonce reads the schedule: "jobs file" or the Cloud Scheduler
	// job's full name.
	Source    string          `json:"source"`
	From      time.Time       `json:"from"`
	To        time.Time       `json:"to"`
	Ticks     []TickJSON      `json:"ticks"`
	Unmatched []UnmatchedJSON `json:"unmatched,omitempty"`
	// UnmatchedTruncated: more runs were created in the span than the audit lists.
	UnmatchedTruncated bool `json:"unmatched_truncated,omitempty"`
	// Missing counts the page's missing ticks.
	Missing       int    `json:"missing"`
	NextPageToken string `json:"next_page_token,omitempty"`
}

// RunRequest is the body of POST /v1/jobs/{job}:run.
type RunRequest struct {
	// Key names the run (an Idempotency-Key); empty: a new one, "manual:" and a
	// UUIDv7. The same key again is the same run.
	Key string `json:"key,omitempty"`
	// Payload is the run's payload (text); empty: none.
	Payload string `json:"payload,omitempty"`
}

// BackfillRequest is the body of POST /v1/jobs/{job}:backfill.
type BackfillRequest struct {
	// From and To bound the ticks, [From, To) (RFC 3339).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// DryRun lists the ticks a backfill would claim, claiming none.
	DryRun bool `json:"dry_run,omitempty"`
	// Payload, when set, is what the runs carry instead of the scheduler's body (the
	// Cloud Scheduler job's, or none for a jobs-file schedule): a late delivery of a
	// tick with another payload than its backfilled run is refused (422).
	Payload *string `json:"payload,omitempty"`
	// PageToken continues a backfill: the answer's next_page_token.
	PageToken string `json:"page_token,omitempty"`
}

// Outcomes of a backfilled tick.
const (
	BackfillClaimed    = "claimed"
	BackfillWouldClaim = "would_claim"
	// BackfillExisted: a run of the tick arrived between the audit and the claim.
	BackfillExisted = "existed"
)

// BackfilledJSON is one tick a backfill claimed (or would).
type BackfilledJSON struct {
	Tick    time.Time `json:"tick"`
	RunID   string    `json:"run_id"`
	Outcome string    `json:"outcome"`
}

// BackfillJSON is the answer of POST /v1/jobs/{job}:backfill: the missing ticks of one
// page of the window, and what became of each.
type BackfillJSON struct {
	Job    string           `json:"job"`
	DryRun bool             `json:"dry_run,omitempty"`
	Ticks  []BackfilledJSON `json:"ticks"`
	// Claimed counts the runs this request created.
	Claimed       int    `json:"claimed"`
	NextPageToken string `json:"next_page_token,omitempty"`
}
