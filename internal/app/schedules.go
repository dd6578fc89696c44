package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/ticks"
)

// DemoSchedule is the -dev demo job's schedule under -schedule: every minute, in UTC.
const DemoSchedule = "* * * * *"

// scheduleBook returns the book of js's scheduled jobs (schedule or scheduler_job), or
// nil when none has one. A scheduler_job is read from Cloud Scheduler with Application
// Default Credentials, and kept fresh by tickLoops.
func scheduleBook(ctx context.Context, js map[string]*jobs.Job, log *slog.Logger) (*ticks.Book, error) {
	for _, j := range js {
		if j.HasSchedule() {
			return ticks.NewBook(ctx, js, &ticks.BookOptions{Logger: log})
		}
	}
	return nil, nil
}

// withDemoSchedule returns js with the -dev demo job on DemoSchedule (unless the jobs
// file names a job "demo" itself): what -dev -schedule fires.
func withDemoSchedule(js map[string]*jobs.Job) map[string]*jobs.Job {
	out := make(map[string]*jobs.Job, len(js)+1)
	for name, j := range js {
		out[name] = j
	}
	if _, ok := out[DemoJob]; !ok {
		out[DemoJob] = &jobs.Job{Name: DemoJob, Schedule: schedule.MustParse(DemoSchedule, "UTC")}
	}
	return out
}

// checkSchedule refuses -schedule when no job has a schedule of the jobs file to fire.
func checkSchedule(f *IngressFlags, book *ticks.Book) error {
	if f.Schedule && len(book.Own()) == 0 {
		return config.Usagef("-schedule: no job of the jobs file has a \"schedule\" for runonce's own scheduler to fire (-jobs; a scheduler_job's ticks are Cloud Scheduler's)")
	}
	return nil
}

// firedSchedules are the schedules -schedule fires, by job (none without it).
func firedSchedules(f *IngressFlags, book *ticks.Book) map[string]string {
	if !f.Schedule {
		return nil
	}
	out := map[string]string{}
	for _, name := range book.Own() {
		if spec, err := book.Spec(name); err == nil {
			out[name] = spec.Schedule.String()
		}
	}
	return out
}

// tickLoops are the background loops of a book: its Cloud Scheduler readings, the
// missed-tick check of namespace, and (Scheduler set) runonce's own scheduler.
type tickLoops struct {
	book    *ticks.Book
	checker *ticks.Checker
	sched   *ticks.Scheduler
}

// tickConfig configures the tick loops of one process.
type tickConfig struct {
	// Book is the jobs file's schedules; nil: none (the loops do nothing).
	Book   *ticks.Book
	Ledger *ledger.Ledger
	// Namespace is the namespace whose ticks are checked.
	Namespace string
	// Meter records ticks.MetricMissed.
	Meter metric.Meter
	// Fire, when set, is -schedule: runonce's own scheduler fires the jobs file's
	// schedules through it; a book with none is a usage error.
	Fire ticks.FireFunc
	Log  *slog.Logger
	// Now, Poll and CheckEvery replace the clock, the scheduler's poll and the checker's
	// pass interval, for tests; zero: the defaults.
	Now              func() time.Time
	Poll, CheckEvery time.Duration
}

// newTickLoops returns the loops c describes.
func newTickLoops(c *tickConfig) (*tickLoops, error) {
	if c.Book == nil {
		if c.Fire != nil {
			return nil, config.Usagef("-schedule: no job of the jobs file has a schedule to fire (give a job \"schedule\", and -jobs)")
		}
		return &tickLoops{}, nil
	}
	t := &tickLoops{book: c.Book}
	var err error
	t.checker, err = ticks.NewChecker(&ticks.CheckerConfig{Book: c.Book, Reader: &ticks.Reader{Ledger: c.Ledger, Namespace: c.Namespace},
		Meter: c.Meter, Logger: c.Log, Now: c.Now, Every: c.CheckEvery})
	if err != nil {
		return nil, err
	}
	if c.Fire != nil {
		t.sched, err = ticks.NewScheduler(&ticks.SchedulerConfig{Book: c.Book, Fire: c.Fire, Logger: c.Log, Now: c.Now, Poll: c.Poll})
		if err != nil {
			return nil, config.Usagef("-schedule: %v", err)
		}
	}
	return t, nil
}

// fireThrough is -schedule's FireFunc: each tick is claimed and published by h exactly
// as the scheduler's delivery of it would be, with the scheduler's body.
func fireThrough(h *ingress.Handler) ticks.FireFunc {
	return func(ctx context.Context, spec *ticks.Spec, tick time.Time) (string, bool, error) {
		return h.StartTick(ctx, spec, tick, spec.Body)
	}
}

// run runs the loops until ctx is done, then closes the book.
func (t *tickLoops) run(ctx context.Context) error {
	if t.book == nil {
		return nil
	}
	defer t.book.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return t.book.Run(gctx) })
	g.Go(func() error { return t.checker.Run(gctx) })
	if t.sched != nil {
		g.Go(func() error { return t.sched.Run(gctx) })
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
