package schedule

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Status is what became of an expected tick: the status of its run, or why it has none.
type Status string

// The statuses of a tick with no run.
const (
	// StatusUpcoming: the tick is not due yet (at or after now).
	StatusUpcoming Status = "upcoming"
	// StatusPending: due, no run yet, still within its grace.
	StatusPending Status = "pending"
	// StatusMissing: no run after its grace: the tick was missed.
	StatusMissing Status = "missing"
	// StatusPaused: the scheduler job was paused at the tick, which is therefore not
	// missed.
	StatusPaused Status = "paused"
	// StatusCovered: one of the two ticks of a wall time the clocks repeated (Tick.DST),
	// with no run while the other has one: Cloud Scheduler may fire such a time once.
	StatusCovered Status = "covered"
)

// The statuses of a tick's run: the ledger's, and the overlap policy's.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusWaiting   Status = "waiting"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusSkipped   Status = "skipped"
	StatusCancelled Status = "cancelled"
)

// RunStatuses are the statuses a Run may have.
var RunStatuses = []Status{StatusQueued, StatusRunning, StatusWaiting, StatusCompleted, StatusFailed, StatusSkipped, StatusCancelled}

// Run is what the audit needs to know of a run of the job (a ledger record, mapped by
// the caller).
type Run struct {
	// ID is the run's ID.
	ID string
	// ScheduleTime is the tick the run was keyed by (X-CloudScheduler-ScheduleTime, or
	// the tick runonce's own scheduler fired); zero for a run keyed otherwise (a manual
	// run, an Idempotency-Key). Ticks are whole minutes: a schedule time with seconds
	// matches the tick of its minute.
	ScheduleTime time.Time
	// Status is one of RunStatuses.
	Status Status
	// CreatedAt is when its first delivery arrived (the ingress's claim).
	CreatedAt time.Time
	// StartedAt is when a worker first started it; zero if none has.
	StartedAt time.Time
	// FinishedAt is when it reached a final status; zero while it is live.
	FinishedAt time.Time
}

// Period is a span of time, [From, To); a zero To: still going on.
type Period struct {
	From, To time.Time
}

// Contains reports whether t is in the period.
func (p Period) Contains(t time.Time) bool {
	return !t.Before(p.From) && (p.To.IsZero() || t.Before(p.To))
}

// Row is one expected tick and what became of it.
type Row struct {
	Tick   Tick
	Status Status
	// Run is the tick's run (the first created, when several have its time); nil if none.
	Run *Run
	// Late is how long after the tick its run's first delivery arrived (negative when
	// before it: the sender's clock); zero without a run.
	Late time.Duration
	// Took is how long the run has run: from StartedAt to FinishedAt, or to now while it
	// runs; zero if it never started.
	Took time.Duration
	// Grace is how long after the tick a run could still arrive (Grace.For).
	Grace time.Duration
}

// Reasons a run matched no expected tick.
const (
	// ReasonNoTick: its schedule time is not a tick of the schedule (the schedule
	// changed, or a forced run).
	ReasonNoTick = "no-tick"
	// ReasonKeyed: it has no schedule time (a manual run, an Idempotency-Key).
	ReasonKeyed = "keyed"
	// ReasonSecondRun: another run already has its tick (another scheduler job, or
	// another namespace, sending the same job).
	ReasonSecondRun = "second-run"
)

// Unmatched is a run that matched no expected tick, and why.
type Unmatched struct {
	Run    Run
	Reason string
}

// AuditParams are Account's inputs.
type AuditParams struct {
	// Schedule is the job's schedule (required).
	Schedule *Schedule
	// From and To bound the ticks: [From, To) (required, From before To).
	From, To time.Time
	// Limit caps the rows; when more ticks remain, Audit.Next is the From of the next
	// page. Zero: DefaultAuditLimit; at most MaxAuditLimit.
	Limit int
	// Now is the present: ticks at or after it are upcoming (required).
	Now time.Time
	// Runs are the job's runs whose ScheduleTime (CreatedAt when it has none) is in the
	// window; others are ignored.
	Runs []Run
	// Grace decides when a tick without a run is missing.
	Grace Grace
	// Paused are the spans the scheduler job was paused: their ticks without a run are
	// StatusPaused, never missing.
	Paused []Period
}

// Limits of AuditParams.Limit.
const (
	DefaultAuditLimit = 500
	MaxAuditLimit     = 5000
)

// Audit is Account's answer.
type Audit struct {
	// Rows are the expected ticks in [From, Next or To), oldest first.
	Rows []Row
	// Unmatched are the runs in the same span that matched no row, oldest first.
	Unmatched []Unmatched
	// Next is the From of the next page when Rows stopped at the limit; zero otherwise.
	Next time.Time
}

// Account accounts for every expected tick in a window: its run's status, or upcoming,
// pending, paused, covered or missing, with how late the run's first delivery was and
// how long it took, and lists the runs that matched no tick. It is pure: the caller
// reads the runs and the paused spans.
func Account(p *AuditParams) (*Audit, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultAuditLimit
	}
	a := &Audit{}
	var ticks []Tick
	end := p.To
	for tk := range p.Schedule.Ticks(p.From, p.To) {
		if len(ticks) == limit {
			a.Next, end = tk.Time, tk.Time
			break
		}
		ticks = append(ticks, tk)
	}
	runs := slices.Clone(p.Runs)
	slices.SortStableFunc(runs, func(x, y Run) int { return x.CreatedAt.Compare(y.CreatedAt) })
	byTick := map[int64]*Run{}
	for i := range ticks {
		byTick[ticks[i].Time.Unix()] = nil
	}
	for i := range runs {
		r := &runs[i]
		at := r.ScheduleTime
		if at.IsZero() {
			at = r.CreatedAt
		}
		if at.Before(p.From) || !at.Before(end) {
			continue
		}
		st := r.ScheduleTime.Truncate(time.Minute).Unix()
		have, expected := byTick[st]
		switch {
		case r.ScheduleTime.IsZero():
			a.Unmatched = append(a.Unmatched, Unmatched{Run: *r, Reason: ReasonKeyed})
		case !expected:
			a.Unmatched = append(a.Unmatched, Unmatched{Run: *r, Reason: ReasonNoTick})
		case have != nil:
			a.Unmatched = append(a.Unmatched, Unmatched{Run: *r, Reason: ReasonSecondRun})
		default:
			byTick[st] = r
		}
	}
	slices.SortStableFunc(a.Unmatched, func(x, y Unmatched) int { return keyTime(x.Run).Compare(keyTime(y.Run)) })
	a.Rows = make([]Row, len(ticks))
	for i, tk := range ticks {
		next := time.Time{}
		if i+1 < len(ticks) {
			next = ticks[i+1].Time
		} else if n, ok := p.Schedule.Next(tk.Time); ok {
			next = n.Time
		}
		row := Row{Tick: tk, Grace: p.Grace.For(tk.Time, next), Run: byTick[tk.Time.Unix()]}
		row.Status = p.status(row, ticks, byTick)
		if r := row.Run; r != nil {
			row.Late = r.CreatedAt.Sub(tk.Time)
			switch {
			case r.StartedAt.IsZero():
			case !r.FinishedAt.IsZero():
				row.Took = r.FinishedAt.Sub(r.StartedAt)
			case r.Status == StatusRunning:
				row.Took = p.Now.Sub(r.StartedAt)
			}
		}
		a.Rows[i] = row
	}
	return a, nil
}

func keyTime(r Run) time.Time {
	if r.ScheduleTime.IsZero() {
		return r.CreatedAt
	}
	return r.ScheduleTime
}

func (p *AuditParams) status(row Row, ticks []Tick, byTick map[int64]*Run) Status {
	tk := row.Tick
	switch {
	case row.Run != nil:
		return row.Run.Status
	case !tk.Time.Before(p.Now):
		return StatusUpcoming
	case slices.ContainsFunc(p.Paused, func(q Period) bool { return q.Contains(tk.Time) }):
		return StatusPaused
	case tk.DST != DSTNone && slices.ContainsFunc(ticks, func(o Tick) bool {
		return o.DST != DSTNone && o.DST != tk.DST && sameWallTime(o.Local, tk.Local) && byTick[o.Time.Unix()] != nil
	}):
		return StatusCovered
	case p.Now.Before(tk.Time.Add(row.Grace)):
		return StatusPending
	}
	return StatusMissing
}

func sameWallTime(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute()
}

func (p *AuditParams) validate() error {
	var errs []error
	switch {
	case p.Schedule == nil:
		errs = append(errs, errors.New("no schedule"))
	case p.From.IsZero() || p.To.IsZero() || !p.From.Before(p.To):
		errs = append(errs, fmt.Errorf("window [%s, %s) is empty: from must be before to", p.From.Format(time.RFC3339), p.To.Format(time.RFC3339)))
	case p.Now.IsZero():
		errs = append(errs, errors.New("no present time (Now)"))
	case p.Limit < 0 || p.Limit > MaxAuditLimit:
		errs = append(errs, fmt.Errorf("limit %d: want 1 to %d (0: %d)", p.Limit, MaxAuditLimit, DefaultAuditLimit))
	}
	for _, r := range p.Runs {
		if !slices.Contains(RunStatuses, r.Status) {
			errs = append(errs, fmt.Errorf("run %s has status %q, not one of %v", r.ID, r.Status, RunStatuses))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("schedule: account: %w", errors.Join(errs...))
	}
	return nil
}
