package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/schedule"
)

// The jobs commands: the tick audit, backfill and run now (GET /v1/jobs/JOB/ticks, POST
// /v1/jobs/JOB:backfill and :run).

func jobsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "jobs",
		Short: "audit a job's ticks, backfill the missing ones, start a run by hand",
		Long: `jobs audits the ticks of a job with a schedule (every expected tick and what became of
it), backfills the ticks that were missed, and starts a run of any job by hand.`,
		Args: subcommandArgs,
		RunE: needsSubcommand,
	}
	c.AddCommand(ticksCmd(g), backfillCmd(g), runJobCmd(g))
	return c
}

// timeFlag is --from or --to: an RFC 3339 time, or a Go duration before now ("24h").
type timeFlag struct {
	raw string
}

func (f *timeFlag) String() string     { return f.raw }
func (f *timeFlag) Set(s string) error { f.raw = s; return nil }
func (f *timeFlag) Type() string       { return "time" }

// at returns the flag's time (zero when unset).
func (f *timeFlag) at(name string, now time.Time) (time.Time, error) {
	if f.raw == "" {
		return time.Time{}, nil
	}
	if t, err := ingress.ParseRFC3339(f.raw); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(f.raw); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, usagef("--%s %q is neither an RFC 3339 time (2026-11-01T06:00:00Z) nor a duration before now (90m, 24h)", name, f.raw)
}

const timeHelp = "an RFC 3339 time, or a duration before now (90m, 24h)"

func jobArg(c *cobra.Command, args []string) (string, error) {
	if err := jobs.ValidName(args[0]); err != nil {
		return "", usagef("%s: %v", commandName(c), err)
	}
	return args[0], nil
}

type ticksFlags struct {
	from, to           timeFlag
	namespace, pageTok string
	pageSize           int
}

func ticksCmd(g *globals) *cobra.Command {
	var f ticksFlags
	c := &cobra.Command{
		Use:   "ticks JOB [flags]",
		Short: "list a job's expected ticks and what became of each",
		Long: `ticks lists every tick the job's schedule expected in the window (by default the last
24 hours), oldest first, with what became of it: its run's status (queued, running,
completed, failed, cancelled) or, without a run, missing (its grace has passed), pending
(within it), paused (its Cloud Scheduler job was paused), covered (a wall time the clocks
repeated, whose other tick ran) or upcoming; how late its first delivery arrived and how
long the run took. Runs that arrived for no expected tick are listed after, with why.`,
		Example: `  runonce jobs ticks nightly-etl --from 168h
  runonce jobs ticks send-invoices --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z --json`,
		Args: exactArgs("a job"),
		RunE: func(c *cobra.Command, args []string) error {
			job, err := jobArg(c, args)
			if err != nil {
				return err
			}
			return listTicks(c.Context(), g, job, &f, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.Var(&f.from, "from", "the window's start: "+timeHelp+" (default: --to minus 24h)")
	fs.Var(&f.to, "to", "the window's end, excluded: "+timeHelp+" (default: now)")
	fs.StringVar(&f.namespace, "namespace", "", "the namespace of the runs (default: the ingress's)")
	fs.IntVar(&f.pageSize, "page-size", 0, "ticks per page (default 200, at most 1000)")
	fs.StringVar(&f.pageTok, "page-token", "", "continue a listing (the token the previous page printed)")
	return c
}

func listTicks(ctx context.Context, g *globals, job string, f *ticksFlags, stdout, stderr io.Writer) error {
	now := g.now()
	q := url.Values{}
	for name, tf := range map[string]*timeFlag{"from": &f.from, "to": &f.to} {
		t, err := tf.at(name, now)
		if err != nil {
			return err
		}
		if !t.IsZero() {
			q.Set(name, t.Format(time.RFC3339))
		}
	}
	for k, v := range map[string]string{"namespace": f.namespace, "page_token": f.pageTok} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.pageSize != 0 {
		q.Set("page_size", strconv.Itoa(f.pageSize))
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	a, err := c.Ticks(ctx, job, q)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, a)
	}
	fmt.Fprintf(stdout, "%s: %q in %s (%s), ticks from %s to %s\n\n", a.Job, a.Schedule, a.TimeZone, a.Source,
		a.From.Format(time.RFC3339), a.To.Format(time.RFC3339))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tWALL TIME\tSTATUS\tRUN ID\tLATE\tTOOK")
	for _, t := range a.Ticks {
		wall := t.WallTime
		if t.DST != "" {
			wall += " (" + t.DST + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Tick.Format(time.RFC3339), wall, t.Status, dash(ShortID(t.RunID)),
			seconds(t.RunID != "", t.LateSeconds), seconds(t.TookSeconds != 0, t.TookSeconds))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(a.Unmatched) > 0 {
		fmt.Fprintln(stdout, "\nRUNS FOR NO EXPECTED TICK")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN ID\tSCHEDULE TIME\tSTATUS\tCREATED\tWHY")
		for _, u := range a.Unmatched {
			st := "—"
			if !u.ScheduleTime.IsZero() {
				st = u.ScheduleTime.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ShortID(u.RunID), st, u.Status, u.CreatedAt.Format(time.RFC3339), unmatchedWhy(u.Reason))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(a.Ticks) == 0 {
		fmt.Fprintln(stderr, "no tick expected in this window")
	}
	if a.Missing > 0 {
		fmt.Fprintf(stderr, "%d missing on this page: runonce jobs backfill %s --from %s --to %s claims them\n", a.Missing, job,
			a.From.Format(time.RFC3339), a.To.Format(time.RFC3339))
	}
	if a.UnmatchedTruncated {
		fmt.Fprintln(stderr, "more runs were created in this span than the audit lists: narrow the window to see them all")
	}
	if a.NextPageToken != "" {
		fmt.Fprintf(stderr, "more: --page-token %s\n", a.NextPageToken)
	}
	return nil
}

func unmatchedWhy(reason string) string {
	switch reason {
	case schedule.ReasonKeyed:
		return "keyed (by hand, or an Idempotency-Key)"
	case schedule.ReasonNoTick:
		return "not a tick of the schedule (changed? forced?)"
	case schedule.ReasonSecondRun:
		return "a second run of a tick (another scheduler job or namespace)"
	}
	return reason
}

// seconds shows a duration in seconds for people ("—" when not known).
func seconds(known bool, s float64) string {
	if !known {
		return "—"
	}
	d := time.Duration(s * float64(time.Second))
	if d < 0 {
		return "-" + (-d).Round(time.Second).String()
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

type backfillFlags struct {
	from, to timeFlag
	dryRun   bool
	payload  string
}

func backfillCmd(g *globals) *cobra.Command {
	var f backfillFlags
	c := &cobra.Command{
		Use:   "backfill JOB --from TIME --to TIME [flags]",
		Short: "claim the missed ticks of a job, as the scheduler would have",
		Long: `backfill claims each missing tick of the window (the ticks jobs ticks shows missing) under
the run ID the scheduler's delivery of the tick has, and publishes it: a late delivery of
the tick is then a duplicate of the backfilled run, never a second run. It goes through
the window a page at a time, at the ingress's rate (10 claims a second by default), and
refuses ticks older than the ingress's retention. The runs carry the Cloud Scheduler
job's body (none for a jobs-file schedule), or --payload.`,
		Example: `  runonce jobs backfill nightly-etl --from 2026-11-01T00:00:00Z --to 2026-11-03T00:00:00Z --dry-run
  runonce jobs backfill nightly-etl --from 48h --to 1h`,
		Args: exactArgs("a job"),
		RunE: func(c *cobra.Command, args []string) error {
			job, err := jobArg(c, args)
			if err != nil {
				return err
			}
			return runBackfill(c, g, job, &f)
		},
	}
	fs := c.Flags()
	fs.Var(&f.from, "from", "the window's start: "+timeHelp+" (required)")
	fs.Var(&f.to, "to", "the window's end, excluded: "+timeHelp+" (required)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "list the ticks it would claim, claiming none")
	fs.StringVar(&f.payload, "payload", "", "the runs' payload instead of the scheduler's body (a late delivery with another payload is refused, 422)")
	return c
}

func runBackfill(c *cobra.Command, g *globals, job string, f *backfillFlags) error {
	ctx, stdout := c.Context(), c.OutOrStdout()
	now := g.now()
	req := &api.BackfillRequest{DryRun: f.dryRun}
	var err error
	if req.From, err = f.from.at("from", now); err != nil {
		return err
	}
	if req.To, err = f.to.at("to", now); err != nil {
		return err
	}
	if req.From.IsZero() || req.To.IsZero() {
		return usagef("jobs backfill needs --from and --to: the window whose missing ticks to claim")
	}
	if c.Flags().Changed("payload") {
		req.Payload = &f.payload
	}
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	var pages []*api.BackfillJSON
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !g.json {
		fmt.Fprintln(tw, "TICK\tRUN ID\tOUTCOME")
	}
	n, claimed := 0, 0
	for {
		res, err := cl.Backfill(ctx, job, req)
		if err != nil {
			_ = tw.Flush()
			return fmt.Errorf("%w (claimed before: %d)", err, claimed)
		}
		pages = append(pages, res)
		for _, t := range res.Ticks {
			if !g.json {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Tick.Format(time.RFC3339), ShortID(t.RunID), strings.ReplaceAll(t.Outcome, "_", " "))
			}
		}
		n += len(res.Ticks)
		claimed += res.Claimed
		if res.NextPageToken == "" {
			break
		}
		req.PageToken = res.NextPageToken
	}
	if g.json {
		return printJSON(stdout, pages)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case f.dryRun:
		fmt.Fprintf(stdout, "dry run: %d missing ticks would be claimed\n", n)
	default:
		fmt.Fprintf(stdout, "claimed %d of %d missing ticks (the others got a run meanwhile)\n", claimed, n)
	}
	return nil
}

type runFlags struct {
	payload, key string
}

func runJobCmd(g *globals) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run JOB [flags]",
		Short: "start a run of a job now, by hand",
		Long: `run starts a run of the job now, keyed by --key or by a new key it prints (manual:…):
never a tick's key, so the next scheduled run is not swallowed (Cloud Scheduler's "Force
run" reuses the next tick's time, and the ingress refuses it). The same --key again is
the same run: retrying the command is safe.`,
		Example: `  runonce jobs run nightly-etl
  runonce jobs run send-invoices --key rerun-2026-11-01 --payload '{"month": "2026-10"}'`,
		Args: exactArgs("a job"),
		RunE: func(c *cobra.Command, args []string) error {
			job, err := jobArg(c, args)
			if err != nil {
				return err
			}
			cl, err := g.client(c.Context())
			if err != nil {
				return err
			}
			res, err := cl.RunJob(c.Context(), job, &api.RunRequest{Key: f.key, Payload: f.payload})
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(c.OutOrStdout(), res)
			}
			if res.Duplicate {
				fmt.Fprintf(c.OutOrStdout(), "run %s already exists for key %s: it is %s\n", res.RunID, res.Key, res.Status)
				return nil
			}
			fmt.Fprintf(c.OutOrStdout(), "run %s started, key %s (runonce runs show %s)\n", res.RunID, res.Key, ShortID(res.RunID))
			return nil
		},
	}
	c.Flags().StringVar(&f.payload, "payload", "", "the run's payload")
	c.Flags().StringVar(&f.key, "key", "", "the run's key (default: a new one, manual:UUID); the same key is the same run")
	return c
}
