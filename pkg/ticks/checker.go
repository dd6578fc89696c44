package ticks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/runonce/runonce/pkg/schedule"
)

// MetricMissed is the counter of missed ticks, by job (attribute "job").
const MetricMissed = "runonce.job.ticks.missed"

// DefaultCheckEvery is how often a Checker looks for missed ticks.
const DefaultCheckEvery = time.Minute

// maxCheckTicks bounds the ticks one job's check reads in one pass; a longer backlog
// (a ledger down for hours) is read over the following passes.
const maxCheckTicks = 500

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	// Book names the scheduled jobs and their schedules. Required.
	Book *Book
	// Reader reads the ledger (its Namespace is the one checked). Required.
	Reader *Reader
	// Every is how often Run checks (DefaultCheckEvery).
	Every time.Duration
	// Meter records MetricMissed; a no-op meter by default.
	Meter metric.Meter
	// Logger gets one ERROR line per missed tick; slog.Default() by default.
	Logger *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Checker finds the ticks that were missed: a tick with no run once its grace has passed
// (schedule.Account's StatusMissing; a paused scheduler job's tick is not missed). It
// counts each in MetricMissed and logs it at ERROR, once: a tick is counted by the pass
// during which its grace ran out, so a checker counts only the ticks whose grace ran
// out while it was running (from its start on), never one twice, and a restart counts
// nothing again. Each process that runs a checker counts on its own: N processes (worker
// replicas) count a missed tick at most N times, one ERROR line each.
type Checker struct {
	cfg     CheckerConfig
	log     *slog.Logger
	missed  metric.Int64Counter
	checked map[string]time.Time // by job: the pass that checked it last (ticks whose grace ran out before are done)
	counted map[string]map[int64]bool
}

// NewChecker returns a checker; its first pass counts the ticks whose grace runs out
// from now on.
func NewChecker(cfg *CheckerConfig) (*Checker, error) {
	if cfg.Book == nil || cfg.Reader == nil || cfg.Reader.Ledger == nil {
		return nil, errors.New("ticks: CheckerConfig.Book and Reader (with its Ledger) are required")
	}
	c := &Checker{cfg: *cfg, checked: map[string]time.Time{}, counted: map[string]map[int64]bool{}}
	c.cfg.Every = cmp.Or(c.cfg.Every, DefaultCheckEvery)
	if c.cfg.Now == nil {
		c.cfg.Now = time.Now
	}
	if c.cfg.Meter == nil {
		c.cfg.Meter = noop.NewMeterProvider().Meter("")
	}
	c.log = c.cfg.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With(slog.String("component", "ticks"))
	var err error
	if c.missed, err = c.cfg.Meter.Int64Counter(MetricMissed,
		metric.WithDescription("ticks of a job's schedule with no run once their grace passed (each process counts a tick at most once)"),
		metric.WithUnit("{tick}")); err != nil {
		return nil, fmt.Errorf("ticks: metric: %w", err)
	}
	start := c.cfg.Now()
	for _, job := range cfg.Book.Jobs() {
		c.checked[job] = start
	}
	return c, nil
}

// Run checks at once and then every Every until ctx is done; a failed check is logged
// and its ticks are checked again by the next pass. It returns nil when ctx is done.
func (c *Checker) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		if _, err := c.Check(ctx); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "missed-tick check failed; its ticks are checked again at the next pass", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check is one pass over every scheduled job: it counts and logs the ticks whose grace
// ran out since the job's last pass and that have no run, and returns how many. Run
// calls it; it is not safe for concurrent use.
func (c *Checker) Check(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, job := range c.cfg.Book.Jobs() {
		m, err := c.checkJob(ctx, job)
		n += m
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

func (c *Checker) checkJob(ctx context.Context, job string) (int, error) {
	spec, err := c.cfg.Book.Spec(job)
	if errors.Is(err, ErrNotRead) {
		return 0, nil // unknown until read; the ticks wait for a pass that knows them
	}
	if err != nil {
		return 0, err
	}
	now := c.cfg.Now()
	last := c.checked[job]
	cands, upTo := candidates(spec, last, now)
	if len(cands) == 0 {
		c.checked[job] = upTo
		return 0, nil
	}
	// The tick of a repeated wall time is covered by its twin's run: read the twins too.
	ticks := slices.Clone(cands)
	for _, tk := range cands {
		if tk.DST != schedule.DSTNone {
			if tw, ok := twin(spec.Schedule, tk); ok {
				ticks = append(ticks, tw)
			}
		}
	}
	slices.SortFunc(ticks, func(a, b schedule.Tick) int { return a.Time.Compare(b.Time) })
	ticks = slices.CompactFunc(ticks, func(a, b schedule.Tick) bool { return a.Time.Equal(b.Time) })
	from, to := ticks[0].Time, ticks[len(ticks)-1].Time.Add(time.Nanosecond)
	times := make([]time.Time, len(ticks))
	for i, tk := range ticks {
		times[i] = tk.Time
	}
	runs, _, err := c.cfg.Reader.runs(ctx, spec, times, from, now)
	if err != nil {
		return 0, err
	}
	a, err := schedule.Account(&schedule.AuditParams{Schedule: spec.Schedule, From: from, To: to, Now: now,
		Limit: schedule.MaxAuditLimit, Runs: runs, Grace: spec.Grace, Paused: spec.Paused})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, row := range a.Rows {
		if row.Status != schedule.StatusMissing || !slices.ContainsFunc(cands, func(t schedule.Tick) bool { return t.Time.Equal(row.Tick.Time) }) {
			continue
		}
		if !c.count(job, row.Tick.Time) {
			continue
		}
		n++
		c.missed.Add(ctx, 1, metric.WithAttributes(attribute.String("job", job)))
		c.log.ErrorContext(ctx, "tick missed: no run arrived within its grace",
			slog.String("job", job), slog.Time("tick", row.Tick.Time), slog.String("wall_time", row.Tick.Local.Format("2006-01-02 15:04 MST")),
			slog.String("scheduler_job", spec.SchedulerJob), slog.String("schedule", spec.Schedule.String()),
			slog.Duration("grace", row.Grace), slog.String("namespace", c.cfg.Reader.Namespace),
			slog.String("run_id", spec.RunID(c.cfg.Reader.Namespace, row.Tick.Time)),
			slog.String("backfill", fmt.Sprintf("runonce jobs backfill %s --from %s --to %s", job,
				row.Tick.Time.Format(time.RFC3339), row.Tick.Time.Add(time.Minute).Format(time.RFC3339))))
	}
	c.checked[job] = upTo
	c.prune(job, upTo)
	return n, nil
}

// candidates returns the ticks of spec whose grace runs out in [last, now), not before
// spec.Since, at most maxCheckTicks, and the time the next pass starts from: now, or the
// end of the last candidate's grace when there were more.
func candidates(spec *Spec, last, now time.Time) ([]schedule.Tick, time.Time) {
	if !last.Before(now) {
		return nil, last
	}
	longest := spec.Grace.After
	if longest <= 0 {
		longest = spec.Grace.Retry.Window(0) // the grace without the next tick's cap
	}
	from := last.Add(-longest)
	if spec.Since.After(from) {
		from = spec.Since
	}
	var out []schedule.Tick
	for tk := range spec.Schedule.Ticks(from, now) {
		var next time.Time
		if n, ok := spec.Schedule.Next(tk.Time); ok {
			next = n.Time
		}
		due := tk.Time.Add(spec.Grace.For(tk.Time, next))
		if due.Before(last) || !due.Before(now) {
			continue
		}
		if len(out) == maxCheckTicks {
			return out, due
		}
		out = append(out, tk)
	}
	return out, now
}

// twin returns the other tick of tk's repeated wall time.
func twin(s *schedule.Schedule, tk schedule.Tick) (schedule.Tick, bool) {
	if tk.DST == schedule.DSTFirst {
		n, ok := s.Next(tk.Time)
		return n, ok && n.DST == schedule.DSTSecond
	}
	p, ok := s.Prev(tk.Time)
	return p, ok && p.DST == schedule.DSTFirst
}

// count notes that the tick of job was counted, and reports whether it was not yet.
func (c *Checker) count(job string, t time.Time) bool {
	m := c.counted[job]
	if m == nil {
		m = map[int64]bool{}
		c.counted[job] = m
	}
	if m[t.Unix()] {
		return false
	}
	m[t.Unix()] = true
	return true
}

// prune forgets the counted ticks no pass meets again: those two days before the next
// pass's start (the notes only guard against a grace that changed between passes).
func (c *Checker) prune(job string, upTo time.Time) {
	for t := range c.counted[job] {
		if time.Unix(t, 0).Before(upTo.Add(-48 * time.Hour)) {
			delete(c.counted[job], t)
		}
	}
}
