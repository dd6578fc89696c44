package ticks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler"
)

// Errors of Book.Spec, classified with errors.Is.
var (
	// ErrNoSchedule: the job has neither schedule nor scheduler_job in the jobs file
	// (or the book has no such job): runonce expects no ticks of it.
	ErrNoSchedule = errors.New("the job has no schedule")
	// ErrNotRead: the job's Cloud Scheduler job has not been read yet (the error says
	// why): its ticks are unknown for now.
	ErrNotRead = errors.New("the job's cloud scheduler job has not been read")
)

// Spec is what runonce knows, at one moment, of the ticks of one job.
type Spec struct {
	// Job is the job's name (the path's {job} of its runs).
	Job string
	// SchedulerJob is the scheduler job name that keys the runs of its ticks (what
	// X-CloudScheduler-JobName carries): the Cloud Scheduler job's ID for scheduler_job;
	// the job's own name for a schedule of the jobs file, as runonce's own scheduler
	// (-schedule) and backfill key them.
	SchedulerJob string
	// Schedule is the schedule its ticks follow.
	Schedule *schedule.Schedule
	// Grace decides when a tick without a run is missed.
	Grace schedule.Grace
	// Paused are the spans its Cloud Scheduler job was seen paused (none for a schedule
	// of the jobs file).
	Paused []schedule.Period
	// Since is the earliest time the schedule is known to have been in force: the Cloud
	// Scheduler job's last update by a user (user_update_time), else its first reading;
	// zero for a schedule of the jobs file. The missed-tick check starts there.
	Since time.Time
	// Body is what the scheduler sends with each tick: the Cloud Scheduler job's body;
	// nil for a schedule of the jobs file (runonce's own scheduler sends none).
	Body []byte
	// CatchUp is the jobs file's catch_up: how far back runonce's own scheduler fires
	// the ticks it missed (zero for scheduler_job).
	CatchUp time.Duration
	// Own reports a schedule of the jobs file, which runonce's own scheduler fires;
	// false for scheduler_job, whose ticks Cloud Scheduler sends.
	Own bool
	// Source says where the schedule comes from: "jobs file", or the Cloud Scheduler
	// job's full name.
	Source string
}

// RunID is the ID of the run of the tick at t, in namespace: the one the scheduler's
// delivery of the tick claims.
func (s *Spec) RunID(namespace string, t time.Time) string {
	return ledger.ScheduledRunID(namespace, s.Job, s.SchedulerJob, t)
}

// BookOptions configure a Book; the zero value is the defaults.
type BookOptions struct {
	// ClientOptions reach Cloud Scheduler (tests: a fake's ClientOptions); none: the
	// API with Application Default Credentials.
	ClientOptions []option.ClientOption
	// Source configures each Cloud Scheduler job's reading (every minute by default).
	Source cloudscheduler.SourceOptions
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Book holds the schedules of a jobs file's jobs: a jobs-file schedule as it is, a
// scheduler_job as its cloudscheduler.Source last read it. It is safe for concurrent
// use; Run keeps the Cloud Scheduler readings fresh.
type Book struct {
	log     *slog.Logger
	jobs    map[string]*jobs.Job
	sources map[string]*cloudscheduler.Source // by job
	client  *cloudscheduler.Client

	mu    sync.Mutex
	since map[string]sinceMark // by job: when its current schedule was first seen
}

type sinceMark struct {
	schedule *schedule.Schedule
	at       time.Time
}

// NewBook returns the book of the scheduled jobs of js (jobs.Job.HasSchedule); the
// others are left out. A job with scheduler_job gets a Source, read by Run (and once
// here, so that a reachable API answers Spec at once; a failure is logged and Run
// tries again). Close releases the Cloud Scheduler client.
func NewBook(ctx context.Context, js map[string]*jobs.Job, o *BookOptions) (*Book, error) {
	if o == nil {
		o = &BookOptions{}
	}
	b := &Book{jobs: map[string]*jobs.Job{}, sources: map[string]*cloudscheduler.Source{}, since: map[string]sinceMark{}, log: o.Logger}
	if b.log == nil {
		b.log = slog.Default()
	}
	for name, j := range js {
		if j.HasSchedule() {
			b.jobs[name] = j
		}
	}
	for _, name := range b.Jobs() {
		j := b.jobs[name]
		if j.SchedulerJob == "" {
			continue
		}
		if b.client == nil {
			c, err := cloudscheduler.NewClient(ctx, o.ClientOptions...)
			if err != nil {
				return nil, fmt.Errorf("ticks: job %s reads its schedule from Cloud Scheduler: %w", name, err)
			}
			b.client = c
		}
		so := o.Source
		so.Logger = b.log.With(slog.String("job", name))
		s, err := cloudscheduler.NewSource(b.client, j.SchedulerJob, &so)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("ticks: job %s: %w", name, err)
		}
		b.sources[name] = s
	}
	if err := b.Refresh(ctx); err != nil {
		b.log.WarnContext(ctx, "cloud scheduler jobs not read yet; their ticks are unknown until they are", slog.Any("error", err))
	}
	return b, nil
}

// Refresh reads every Cloud Scheduler job now (cloudscheduler.Source.Refresh); a job
// not read keeps its last reading, and the error names it.
func (b *Book) Refresh(ctx context.Context) error {
	if b == nil {
		return nil
	}
	var mu sync.Mutex
	var errs []error
	var g errgroup.Group
	for name, s := range b.sources {
		g.Go(func() error {
			if _, err := s.Refresh(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("job %s: %w", name, err))
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// Jobs returns the names of the scheduled jobs, sorted.
func (b *Book) Jobs() []string {
	if b == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(b.jobs))
}

// Own returns the jobs whose schedule is the jobs file's (runonce's own scheduler fires
// them), sorted.
func (b *Book) Own() []string {
	var out []string
	for _, name := range b.Jobs() {
		if b.jobs[name].Schedule != nil {
			out = append(out, name)
		}
	}
	return out
}

// Spec returns what is known now of job's ticks: ErrNoSchedule for a job without a
// schedule, ErrNotRead (wrapping the last read's error) for a Cloud Scheduler job not
// read yet.
func (b *Book) Spec(job string) (*Spec, error) {
	var j *jobs.Job
	if b != nil {
		j = b.jobs[job]
	}
	if j == nil {
		return nil, fmt.Errorf("%w: job %s has neither schedule nor scheduler_job in the jobs file", ErrNoSchedule, job)
	}
	if j.Schedule != nil {
		return &Spec{Job: job, SchedulerJob: job, Schedule: j.Schedule, Grace: j.Grace(schedule.DefaultRetry),
			CatchUp: j.CatchUp, Own: true, Source: "jobs file"}, nil
	}
	s := b.sources[job]
	cur, err := s.Current()
	if cur == nil {
		if err == nil {
			err = errors.New("not read yet")
		}
		return nil, fmt.Errorf("%w: job %s: %s: %w", ErrNotRead, job, j.SchedulerJob, err)
	}
	return &Spec{Job: job, SchedulerJob: cur.ID(), Schedule: cur.Schedule, Grace: j.Grace(cur.Retry), Paused: s.Paused(),
		Since: b.sinceOf(job, cur), Body: cur.Body, Source: cur.Name}, nil
}

// sinceOf is Spec.Since of a Cloud Scheduler reading: its user_update_time, or the
// reading that first showed its current schedule.
func (b *Book) sinceOf(job string, cur *cloudscheduler.Job) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.since[job]
	if !ok || !m.schedule.Equal(cur.Schedule) {
		m = sinceMark{schedule: cur.Schedule, at: cur.ReadAt}
		b.since[job] = m
	}
	if !cur.UpdatedAt.IsZero() && cur.UpdatedAt.Before(m.at) {
		return cur.UpdatedAt
	}
	return m.at
}

// Run keeps every Cloud Scheduler reading fresh (cloudscheduler.Source.Run) until ctx
// is done; it returns at once when no job reads one.
func (b *Book) Run(ctx context.Context) error {
	if b == nil {
		return nil
	}
	var g errgroup.Group
	for _, s := range b.sources {
		g.Go(func() error { return s.Run(ctx) })
	}
	return g.Wait()
}

// Close releases the Cloud Scheduler client, if any.
func (b *Book) Close() error {
	if b == nil || b.client == nil {
		return nil
	}
	return b.client.Close()
}
