package ticks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule"
)

// Defaults of Reader's zero fields.
const (
	DefaultParallel  = 16
	DefaultTimeout   = 5 * time.Second
	DefaultMaxListed = 2000
)

// Bounds of an audit's page (AuditParams.Limit).
const (
	DefaultPageSize = 200
	MaxPageSize     = 1000
)

// Reader reads the runs of a job's ticks from a ledger, without an index or a write of
// its own: a tick's run has a known ID (ledger.ScheduledRunID over the namespace, the
// job, the scheduler job name and the tick's time), so each expected tick is one Get;
// the runs that arrived for no expected tick come from ledger.List (the job, created in
// the window), which every backend serves from an index.
type Reader struct {
	// Ledger is read, never written. Required.
	Ledger *ledger.Ledger
	// Namespace is the namespace of the runs (the ingress's -namespace).
	Namespace string
	// Parallel bounds the Gets in flight at once (DefaultParallel).
	Parallel int
	// Timeout bounds each ledger call (DefaultTimeout).
	Timeout time.Duration
	// MaxListed bounds the runs one window reads through List (DefaultMaxListed); the
	// audit says when it stopped there (Audit.Truncated).
	MaxListed int
}

// AuditParams select a page of a job's ticks.
type AuditParams struct {
	// Spec is the job's schedule (Book.Spec). Required.
	Spec *Spec
	// From and To bound the ticks, [From, To). Required.
	From, To time.Time
	// Now is the present: ticks at or after it are upcoming. Required.
	Now time.Time
	// Limit bounds the page's rows: zero means DefaultPageSize; at most MaxPageSize.
	Limit int
}

// Audit is a page of a job's ticks and the runs that matched none.
type Audit struct {
	*schedule.Audit
	// Truncated reports that more runs were created in the window than the reader lists
	// (Reader.MaxListed): Unmatched may lack some of them; the rows are complete.
	Truncated bool
}

// Audit accounts for the ticks of a page (schedule.Account): each tick's run is read by
// its ID, concurrently (at most Parallel Gets at once), and the runs created in the page's
// span (up to the last tick's grace after it) through ledger.List.
func (r *Reader) Audit(ctx context.Context, p *AuditParams) (*Audit, error) {
	if p.Spec == nil {
		return nil, errors.New("ticks: audit: no spec")
	}
	if p.Limit < 0 || p.Limit > MaxPageSize {
		return nil, fmt.Errorf("ticks: audit: page size %d: want 1 to %d (0: %d)", p.Limit, MaxPageSize, DefaultPageSize)
	}
	ap := &schedule.AuditParams{Schedule: p.Spec.Schedule, From: p.From, To: p.To, Now: p.Now,
		Limit: cmp.Or(p.Limit, DefaultPageSize), Grace: p.Spec.Grace, Paused: p.Spec.Paused}
	blank, err := schedule.Account(ap) // the page's ticks, to know which runs to read
	if err != nil {
		return nil, err
	}
	end := p.To
	if !blank.Next.IsZero() {
		end = blank.Next
	}
	ticks := make([]time.Time, len(blank.Rows))
	var grace time.Duration
	for i, row := range blank.Rows {
		ticks[i], grace = row.Tick.Time, max(grace, row.Grace)
	}
	runs, truncated, err := r.runs(ctx, p.Spec, ticks, p.From, end.Add(grace))
	if err != nil {
		return nil, err
	}
	ap.Runs = runs
	a, err := schedule.Account(ap)
	if err != nil {
		return nil, err
	}
	return &Audit{Audit: a, Truncated: truncated}, nil
}

// runs reads the runs of the ticks by ID and the job's runs created in [from, to), each
// once, as schedule.Runs. truncated reports that List stopped at MaxListed.
func (r *Reader) runs(ctx context.Context, spec *Spec, ticks []time.Time, from, to time.Time) (_ []schedule.Run, truncated bool, _ error) {
	got := make([]*ledger.Run, len(ticks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(r.Parallel, DefaultParallel))
	for i, t := range ticks {
		g.Go(func() error {
			id := spec.RunID(r.Namespace, t)
			cctx, cancel := context.WithTimeout(gctx, r.timeout())
			defer cancel()
			run, err := r.Ledger.Get(cctx, &ledger.GetParams{RunID: id})
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("ticks: read the run of %s's tick %s (%s): %w", spec.Job, t.Format(time.RFC3339), id, err)
			}
			got[i] = run
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, err
	}
	listed, truncated, err := r.list(ctx, spec.Job, from, to)
	if err != nil {
		return nil, false, err
	}
	seen := map[string]bool{}
	var out []schedule.Run
	for _, run := range slices.Concat(got, listed) {
		if run == nil || seen[run.ID] {
			continue
		}
		seen[run.ID] = true
		out = append(out, ScheduleRun(run))
	}
	return out, truncated, nil
}

// list reads the job's runs of the namespace created in [from, to), at most MaxListed.
// The namespace is filtered here: the listing's index is the job's.
func (r *Reader) list(ctx context.Context, job string, from, to time.Time) (_ []*ledger.Run, truncated bool, _ error) {
	limit := cmp.Or(r.MaxListed, DefaultMaxListed)
	var out []*ledger.Run
	p := &ledger.ListParams{Job: job, CreatedAfter: from, CreatedBefore: to, PageSize: min(limit, ledger.MaxPageSize)}
	for read := 0; ; {
		cctx, cancel := context.WithTimeout(ctx, r.timeout())
		res, err := r.Ledger.List(cctx, p)
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("ticks: list the runs of %s created from %s to %s: %w", job, from.Format(time.RFC3339), to.Format(time.RFC3339), err)
		}
		for _, run := range res.Runs {
			if run.Namespace == r.Namespace {
				out = append(out, run)
			}
		}
		read += len(res.Runs)
		switch {
		case res.Next == "":
			return out, false, nil
		case read >= limit:
			return out, true, nil
		}
		p.Cursor = res.Next
	}
}

func (r *Reader) timeout() time.Duration { return cmp.Or(r.Timeout, DefaultTimeout) }

// ScheduleRun is what the audit needs of a ledger run: its status (the ledger's, which
// the audit's statuses include), its schedule time, its creation, its first start (the
// earliest start its history keeps; zero when it keeps none) and its end.
func ScheduleRun(r *ledger.Run) schedule.Run {
	s := schedule.Run{ID: r.ID, ScheduleTime: r.ScheduleTime, Status: schedule.Status(r.Status), CreatedAt: r.CreatedAt}
	for _, e := range r.History {
		if e.Kind == ledger.EventStarted {
			s.StartedAt = e.At
			break
		}
	}
	if r.Status.Terminal() {
		s.FinishedAt = r.CompletedAt
	}
	return s
}
