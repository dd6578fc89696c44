package ticks

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"
)

// Defaults of SchedulerConfig.
const (
	// DefaultPoll is how often the scheduler looks at the clock.
	DefaultPoll = time.Second
	// MinLateness is how late a tick is still fired whatever its job's catch_up: the
	// loop's own delay, a restart or a slow claim must not lose a tick.
	MinLateness = time.Minute
)

// FireFunc claims and publishes the run of one tick of spec's job, keyed as Cloud
// Scheduler's delivery of the tick would be (spec.SchedulerJob and the tick's UTC time:
// Spec.RunID) and returns the run's ID; created reports a new run, false a duplicate
// (another replica fired it first). An error leaves the tick to the next poll.
type FireFunc func(ctx context.Context, spec *Spec, tick time.Time) (runID string, created bool, err error)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Book names the jobs: the scheduler fires those whose schedule is the jobs file's
	// (Book.Own). Required.
	Book *Book
	// Fire claims a tick's run. Required.
	Fire FireFunc
	// Poll is how often it looks at the clock (DefaultPoll).
	Poll time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Scheduler is runonce's own scheduler, for where there is no Cloud Scheduler: it fires
// each tick of the jobs file's schedules when it is due, through Fire. Every replica may
// run one: the replicas fire the same tick under the same run ID, so the ledger keeps
// one run and the others are duplicates.
//
// A tick is fired at most MinLateness late, or its job's catch_up (jobs.Job.CatchUp)
// when longer; one found later (the process was down, or the clock jumped) is skipped
// and logged. So after a restart the ticks of the last catch_up are fired, oldest
// first, and older ones are left missed (the tick audit shows them; backfill claims
// them), as Cloud Scheduler, which has no catch-up, leaves them.
type Scheduler struct {
	cfg  SchedulerConfig
	log  *slog.Logger
	jobs []*Spec
}

// NewScheduler returns a scheduler of the book's own jobs; it refuses a book without
// one.
func NewScheduler(cfg *SchedulerConfig) (*Scheduler, error) {
	if cfg.Book == nil || cfg.Fire == nil {
		return nil, errors.New("ticks: SchedulerConfig.Book and Fire are required")
	}
	s := &Scheduler{cfg: *cfg}
	s.cfg.Poll = cmp.Or(s.cfg.Poll, DefaultPoll)
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	s.log = s.cfg.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With(slog.String("component", "scheduler"))
	for _, job := range cfg.Book.Own() {
		spec, err := cfg.Book.Spec(job)
		if err != nil {
			return nil, err
		}
		s.jobs = append(s.jobs, spec)
	}
	if len(s.jobs) == 0 {
		return nil, errors.New("ticks: no job of the jobs file has a schedule for runonce's own scheduler to fire (scheduler_job jobs are Cloud Scheduler's)")
	}
	return s, nil
}

// Jobs returns the specs of the jobs it fires.
func (s *Scheduler) Jobs() []*Spec { return s.jobs }

// lateness is how late a tick of spec is still fired.
func lateness(spec *Spec) time.Duration { return max(spec.CatchUp, MinLateness) }

// jobState is where the scheduler is in one job's ticks.
type jobState struct {
	spec    *Spec
	next    time.Time // the next tick to fire; zero: none left
	failing time.Time // the tick whose fire failed last (logged once)
}

// Run fires the ticks as they come due until ctx is done, and returns nil then. It
// starts with the ticks of the last catch_up (at least MinLateness), oldest first.
func (s *Scheduler) Run(ctx context.Context) error {
	start := s.cfg.Now()
	states := make([]*jobState, len(s.jobs))
	for i, spec := range s.jobs {
		st := &jobState{spec: spec}
		if tk, ok := spec.Schedule.Next(start.Add(-lateness(spec) - time.Nanosecond)); ok {
			st.next = tk.Time
		}
		states[i] = st
		s.log.InfoContext(ctx, "firing the job's ticks", slog.String("job", spec.Job), slog.String("schedule", spec.Schedule.String()),
			slog.Duration("catch_up", spec.CatchUp), slog.Time("next", st.next))
	}
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		for _, st := range states {
			s.fireDue(ctx, st)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// fireDue fires st's due ticks, oldest first, skipping those too late; a failed fire
// stops there until the next poll.
func (s *Scheduler) fireDue(ctx context.Context, st *jobState) {
	spec := st.spec
	var skipped int
	var first, last time.Time
	defer func() {
		if skipped > 0 {
			s.log.WarnContext(ctx, "ticks skipped: they were due longer ago than the job's catch_up when the scheduler came to them (the tick audit shows them missing; runonce jobs backfill claims them)",
				slog.String("job", spec.Job), slog.Int("ticks", skipped), slog.Time("first", first), slog.Time("last", last),
				slog.Duration("catch_up", spec.CatchUp))
		}
	}()
	for !st.next.IsZero() && ctx.Err() == nil {
		now := s.cfg.Now()
		if st.next.After(now) {
			return
		}
		tick := st.next
		if now.Sub(tick) > lateness(spec) {
			if skipped == 0 {
				first = tick
			}
			skipped, last = skipped+1, tick
			s.advance(st)
			continue
		}
		id, created, err := s.cfg.Fire(ctx, spec, tick)
		if err != nil {
			if ctx.Err() == nil && !st.failing.Equal(tick) {
				s.log.WarnContext(ctx, "tick not fired yet; retrying", slog.String("job", spec.Job), slog.Time("tick", tick), slog.Any("error", err))
			}
			st.failing = tick
			return
		}
		level := slog.LevelInfo
		if !created {
			level = slog.LevelDebug // another replica fired it
		}
		s.log.Log(ctx, level, "tick fired", slog.String("job", spec.Job), slog.Time("tick", tick), slog.Bool("new_run", created),
			slog.String("run_id", id))
		s.advance(st)
	}
}

// advance moves st to the tick after its next one.
func (s *Scheduler) advance(st *jobState) {
	cur := st.next
	st.next = time.Time{}
	if tk, ok := st.spec.Schedule.Next(cur); ok {
		st.next = tk.Time
	}
}
