// Package cloudscheduler reads a job's schedule from Cloud Scheduler: its schedule and
// time zone (as a schedule.Schedule), its state (paused or not) and its retry settings
// (as a schedule.Retry), with the official client (cloud.google.com/go/scheduler/apiv1)
// and Application Default Credentials. A Source keeps one job's latest reading,
// refreshed periodically, and the spans it saw the job paused.
//
// The caller's service account needs cloudscheduler.jobs.get on the job
// (roles/cloudscheduler.viewer). Errors say what went wrong: ErrPermissionDenied names
// the role, ErrNotFound the job, ErrUnauthenticated the credentials, ErrSchedule a
// schedule runonce cannot evaluate (Cloud Scheduler's English-like format); anything
// else (UNAVAILABLE, a deadline) is passing, and the next refresh tries again.
//
// Tests reach a local fake through cloudschedulertest.Fake.ClientOptions.
package cloudscheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	scheduler "cloud.google.com/go/scheduler/apiv1"
	"cloud.google.com/go/scheduler/apiv1/schedulerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/schedule"
)

// Errors a read is classified by (errors.Is); the error's text says what to do.
var (
	ErrNotFound         = errors.New("cloud scheduler job not found")
	ErrPermissionDenied = errors.New("permission denied on the cloud scheduler job")
	ErrUnauthenticated  = errors.New("credentials refused by cloud scheduler")
	ErrSchedule         = errors.New("cloud scheduler job's schedule cannot be evaluated")
)

// ViewerRole is the role that reads a job.
const ViewerRole = "roles/cloudscheduler.viewer"

// State is a job's state, as the API names it.
type State string

// The states of a job. Only StatePaused keeps ticks from counting as missed: a job the
// system disabled, or whose update failed, does not run either, and its ticks are
// missed.
const (
	StateEnabled      State = "ENABLED"
	StatePaused       State = "PAUSED"
	StateDisabled     State = "DISABLED"
	StateUpdateFailed State = "UPDATE_FAILED"
	StateUnspecified  State = "STATE_UNSPECIFIED"
)

// Job is what runonce reads of a Cloud Scheduler job.
type Job struct {
	// Name is the job's full name, projects/P/locations/L/jobs/J.
	Name string
	// Schedule is its schedule in its time zone.
	Schedule *schedule.Schedule
	// State is its state.
	State State
	// Retry is its retry settings and attempt deadline, with the API's defaults for the
	// ones it leaves unset.
	Retry schedule.Retry
	// Body is the body its HTTP or App Engine target sends with every tick (nil for
	// none): what a run backfilled for a tick carries, so that a late delivery of the
	// tick is a duplicate of it rather than a payload mismatch.
	Body []byte
	// UpdatedAt is the job's user_update_time: when a user last changed it (created,
	// updated, paused or resumed it); zero if the API gave none.
	UpdatedAt time.Time
	// ReadAt is when runonce read it.
	ReadAt time.Time
}

// ID is the job's ID (the last part of its name): what it sends as
// X-CloudScheduler-JobName, and so the key of its ticks' runs.
func (j *Job) ID() string { return schedule.SchedulerJobID(j.Name) }

// Client reads jobs. It is safe for concurrent use.
type Client struct {
	c *scheduler.CloudSchedulerClient
}

// NewClient opens a client with Application Default Credentials, or with opts
// (option.WithEndpoint for a regional or private endpoint; a fake's ClientOptions).
func NewClient(ctx context.Context, opts ...option.ClientOption) (*Client, error) {
	c, err := scheduler.NewCloudSchedulerClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("cloudscheduler: client: %w", err)
	}
	return &Client{c: c}, nil
}

// Close closes the client's connection.
func (c *Client) Close() error { return c.c.Close() }

// Get reads a job by its full name. The gRPC client retries UNAVAILABLE and
// DEADLINE_EXCEEDED itself for as long as ctx allows: give ctx a deadline.
func (c *Client) Get(ctx context.Context, name string) (*Job, error) {
	if err := schedule.ValidSchedulerJob(name); err != nil {
		return nil, fmt.Errorf("cloudscheduler: %w", err)
	}
	return c.get(ctx, name, time.Now)
}

func (c *Client) get(ctx context.Context, name string, now func() time.Time) (*Job, error) {
	pb, err := c.c.GetJob(ctx, &schedulerpb.GetJobRequest{Name: name})
	if err != nil {
		return nil, readError(name, err)
	}
	return fromProto(name, pb, now())
}

// readError names what to do about a failed read.
func readError(name string, err error) error {
	project, _, _ := strings.Cut(strings.TrimPrefix(name, "projects/"), "/")
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("cloudscheduler: %w: %s does not exist: check scheduler_job in the jobs file (project, location and job ID): %w", ErrNotFound, name, err)
	case codes.PermissionDenied:
		return fmt.Errorf("cloudscheduler: %w: reading %s: runonce's service account needs %s (cloudscheduler.jobs.get) on project %s, or the job does not exist: %w",
			ErrPermissionDenied, name, ViewerRole, project, err)
	case codes.Unauthenticated:
		return fmt.Errorf("cloudscheduler: %w: reading %s: the Application Default Credentials were refused: %w", ErrUnauthenticated, name, err)
	}
	return fmt.Errorf("cloudscheduler: reading %s: %w", name, err)
}

// fromProto maps the API's job; a schedule runonce cannot evaluate is ErrSchedule.
func fromProto(name string, pb *schedulerpb.Job, now time.Time) (*Job, error) {
	s, err := schedule.Parse(pb.GetSchedule(), pb.GetTimeZone())
	if err != nil {
		return nil, fmt.Errorf("cloudscheduler: %w: %s: %w", ErrSchedule, name, err)
	}
	j := &Job{Name: name, Schedule: s, State: State(pb.GetState().String()), Retry: retryOf(pb), ReadAt: now}
	switch {
	case pb.GetHttpTarget() != nil:
		j.Body = pb.GetHttpTarget().GetBody()
	case pb.GetAppEngineHttpTarget() != nil:
		j.Body = pb.GetAppEngineHttpTarget().GetBody()
	}
	if t := pb.GetUserUpdateTime(); t != nil {
		j.UpdatedAt = t.AsTime()
	}
	return j, nil
}

// appEngineDeadline is the attempt deadline taken for an App Engine target that leaves
// it to the service (10 minutes for standard apps with automatic scaling, the most
// common; Job.attempt_deadline).
const appEngineDeadline = 10 * time.Minute

func retryOf(pb *schedulerpb.Job) schedule.Retry {
	r := schedule.DefaultRetry
	if rc := pb.GetRetryConfig(); rc != nil {
		r.Count = int(rc.GetRetryCount())
		r.MaxRetryDuration = rc.GetMaxRetryDuration().AsDuration()
		r.MaxDoublings = int(rc.GetMaxDoublings())
		if d := rc.GetMinBackoffDuration().AsDuration(); d > 0 {
			r.MinBackoff = d
		}
		if d := rc.GetMaxBackoffDuration().AsDuration(); d > 0 {
			r.MaxBackoff = d
		}
	}
	if d := pb.GetAttemptDeadline().AsDuration(); d > 0 {
		r.AttemptDeadline = d
	} else if pb.GetAppEngineHttpTarget() != nil {
		r.AttemptDeadline = appEngineDeadline
	}
	return r
}

// Defaults of SourceOptions.
const (
	DefaultEvery      = time.Minute
	DefaultTimeout    = 30 * time.Second
	DefaultMaxPeriods = 64
)

// SourceOptions configure a Source; the zero value is the defaults.
type SourceOptions struct {
	// Every is how often Run refreshes (DefaultEvery).
	Every time.Duration
	// Timeout bounds one refresh, the client's own retries included (DefaultTimeout).
	Timeout time.Duration
	// MaxPeriods bounds the paused spans kept, the oldest dropped (DefaultMaxPeriods).
	MaxPeriods int
	// Logger receives a line per failed refresh and per change seen (slog.Default()).
	Logger *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Source keeps one job's latest reading and the spans it saw it paused. It is safe for
// concurrent use.
type Source struct {
	c    *Client
	name string
	o    SourceOptions
	log  *slog.Logger

	mu     sync.Mutex
	job    *Job // the latest good reading
	err    error
	paused []schedule.Period
}

// NewSource returns a source of the job named name (projects/P/locations/L/jobs/J).
func NewSource(c *Client, name string, o *SourceOptions) (*Source, error) {
	if err := schedule.ValidSchedulerJob(name); err != nil {
		return nil, fmt.Errorf("cloudscheduler: %w", err)
	}
	s := &Source{c: c, name: name}
	if o != nil {
		s.o = *o
	}
	s.o.Every = cmp.Or(s.o.Every, DefaultEvery)
	s.o.Timeout = cmp.Or(s.o.Timeout, DefaultTimeout)
	s.o.MaxPeriods = cmp.Or(s.o.MaxPeriods, DefaultMaxPeriods)
	if s.o.Now == nil {
		s.o.Now = time.Now
	}
	s.log = s.o.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With(slog.String("scheduler_job", name))
	return s, nil
}

// Name is the job's full name.
func (s *Source) Name() string { return s.name }

// Refresh reads the job now. On success it becomes Current's job; on failure Current
// keeps the last good reading and reports the error.
func (s *Source) Refresh(ctx context.Context) (*Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	j, err := s.c.get(ctx, s.name, s.o.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return nil, err
	}
	s.observe(j, j.ReadAt)
	s.job, s.err = j, nil
	return j, nil
}

// observe notes a change of schedule or state, and opens or closes a paused span:
//
//   - from the latest reading that saw the job not paused, or from its user_update_time
//     when later (the pause itself, when the API stamps it), to the first reading that
//     sees it resumed, or its user_update_time when earlier;
//   - a job paused at the first reading: from its user_update_time (zero, since ever,
//     when none), as runonce cannot know when it was paused.
//
// A span is therefore never shorter than the pause: ticks near its ends count as paused,
// never as missed.
func (s *Source) observe(j *Job, now time.Time) {
	prev := s.job
	u := j.UpdatedAt
	switch {
	case prev == nil:
		s.log.Info("cloud scheduler job read", slog.String("schedule", j.Schedule.String()), slog.String("state", string(j.State)))
	case !prev.Schedule.Equal(j.Schedule) || prev.State != j.State || prev.Retry != j.Retry:
		s.log.Info("cloud scheduler job changed",
			slog.String("schedule", j.Schedule.String()), slog.String("was_schedule", prev.Schedule.String()),
			slog.String("state", string(j.State)), slog.String("was_state", string(prev.State)))
	}
	paused := j.State == StatePaused
	wasPaused := prev != nil && prev.State == StatePaused
	switch {
	case paused && prev == nil:
		s.paused = append(s.paused, schedule.Period{From: u})
	case paused && !wasPaused:
		from := prev.ReadAt
		if u.After(from) && !u.After(now) {
			from = u
		}
		s.paused = append(s.paused, schedule.Period{From: from})
	case !paused && wasPaused:
		to := now
		if u.After(prev.ReadAt) && u.Before(now) {
			to = u
		}
		if n := len(s.paused); n > 0 && s.paused[n-1].To.IsZero() {
			s.paused[n-1].To = to
		}
	}
	if over := len(s.paused) - s.o.MaxPeriods; over > 0 {
		s.paused = slices.Delete(s.paused, 0, over)
	}
}

// Current returns the latest good reading (nil before the first) and the error of the
// latest refresh (nil when it succeeded).
func (s *Source) Current() (*Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.job, s.err
}

// Paused returns the spans the job was seen paused, oldest first; the last one has a
// zero To while the job is still paused (schedule.AuditParams.Paused).
func (s *Source) Paused() []schedule.Period {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.paused)
}

// Run refreshes at once and then every Every until ctx is done, logging each failure
// (at WARN, with what to do), and returns nil when ctx is done.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.o.Every)
	defer t.Stop()
	for {
		if _, err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "cloud scheduler job not read; keeping the last reading", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
