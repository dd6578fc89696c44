package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
)

// quantiles are milliseconds at p50, p90, p99 and the maximum.
type quantiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func quantilesOf(h *hdrhistogram.Histogram) quantiles {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return quantiles{Count: h.TotalCount(), P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

// report is everything a run of the load test found; -json prints it as it is.
type report struct {
	OK      bool   `json:"ok"`
	Target  string `json:"target"`
	Shape   string `json:"shape"`
	Rate    string `json:"rate,omitempty"`
	Runs    int    `json:"runs"`
	Dups    int    `json:"deliveries_per_run"`
	Workers int    `json:"workers,omitempty"`
	Kills   int    `json:"worker_kills"`
	Seed    uint64 `json:"seed"`
	WorkDir string `json:"work_dir,omitempty"`

	// Note says why runs_per_second is not a benchmark's figure.
	Note string `json:"note"`

	SendSeconds  float64 `json:"send_seconds"`  // first delivery to the last answer
	TotalSeconds float64 `json:"total_seconds"` // first delivery to the last effect call
	RunsPerSec   float64 `json:"runs_per_second"`
	ReqPerSec    float64 `json:"requests_per_second"`

	Requests     int            `json:"requests"`
	Retries      int            `json:"retries"`
	Outcomes     map[string]int `json:"attempt_outcomes"`
	Ingress      quantiles      `json:"ingress_latency"`
	FromIntended quantiles      `json:"first_attempt_latency_from_intended_send"`
	AcceptToDone quantiles      `json:"accept_to_complete"`   // ledger: created_at → finished_at
	SendToEffect quantiles      `json:"first_send_to_effect"` // local: first delivery's intended send → sink applied

	Accepted      int         `json:"runs_accepted"`
	Completed     int         `json:"runs_completed"`
	Failed        int         `json:"runs_failed"`
	MeantToFail   int         `json:"runs_meant_to_fail"`
	Flaky         int         `json:"runs_flaky_downstream"`
	Keyed         int         `json:"runs_keyed_by_idempotency_key"`
	Lost          int         `json:"runs_lost"`
	NotAccepted   int         `json:"runs_not_accepted"`
	DupsSent      int         `json:"duplicates_sent"`
	Suppressed    int         `json:"duplicate_answers"`
	MultiNew      int         `json:"runs_with_several_new_answers"`
	SinkCalls     int         `json:"sink_calls"`
	Applied       int         `json:"effects_applied"`
	Replays       int         `json:"downstream_replays"`
	Foreign       int         `json:"sink_foreign_calls"`
	CutShort      int         `json:"sink_calls_cut_short"`
	PollErrors    int         `json:"poll_errors"`
	CallsPerRun   map[int]int `json:"calls_per_run"` // calls → runs
	AttemptsByRun map[int]int `json:"attempts_per_run"`

	Problems     []problem      `json:"problems"`
	ProblemKinds map[string]int `json:"problem_kinds"`
}

func buildReport(c *config, workers int, runs []*runSpec, cl *client, v *verification, start, sent time.Time) *report {
	r := &report{
		Target: cl.base.String(), Shape: c.Shape, Runs: c.Runs, Dups: c.Dups, Seed: c.Seed,
		Outcomes: map[string]int{}, CallsPerRun: map[int]int{}, AttemptsByRun: map[int]int{},
		ProblemKinds: map[string]int{}, Problems: v.problems, PollErrors: v.pollErrors,
		SinkCalls: v.sinkCalls, Foreign: v.foreign, CutShort: v.cutShort,
	}
	if c.Shape == "steady" {
		r.Rate = c.Rate.String()
	}
	if c.Spawn {
		r.Workers = workers
	}
	cl.mu.Lock()
	maps.Copy(r.Outcomes, cl.kinds)
	r.Requests, r.Retries = cl.requests, cl.retries
	r.Ingress, r.FromIntended = quantilesOf(cl.latency), quantilesOf(cl.intended)
	states := append([]runState{}, cl.states...)
	cl.mu.Unlock()

	accept := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	effect := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	end := sent
	for i, run := range runs {
		s := states[i]
		r.DupsSent += c.Dups - 1
		r.Suppressed += s.DupAnswers
		if s.NewAnswers > 1 {
			r.MultiNew++
		}
		if run.Fail {
			r.MeantToFail++
		}
		if run.Flaky {
			r.Flaky++
		}
		if run.Key != "" {
			r.Keyed++
		}
		if s.RunID != "" {
			r.Accepted++
		}
		if rec := v.records[i]; rec != nil {
			switch rec.Status {
			case "completed":
				r.Completed++
				if !rec.FinishedAt.IsZero() {
					accept.RecordValue(max(rec.FinishedAt.Sub(rec.CreatedAt).Microseconds(), 1))
				}
			case "failed":
				r.Failed++
			}
			if rec.Status.Terminal() {
				r.AttemptsByRun[int(rec.AttemptsMade)]++
			}
		}
		if sr, ok := v.sinkRuns[i]; ok {
			r.Applied += sr.Applied
			r.Replays += sr.Replays
			r.CallsPerRun[sr.Calls]++
			if !sr.FirstApplied.IsZero() && !s.FirstSent.IsZero() {
				effect.RecordValue(max(sr.FirstApplied.Sub(s.FirstSent).Microseconds(), 1))
			}
			if sr.LastCall.After(end) {
				end = sr.LastCall
			}
		} else if s.RunID != "" {
			r.CallsPerRun[0]++
		}
	}
	r.Note = throughputNote(c)
	r.AcceptToDone, r.SendToEffect = quantilesOf(accept), quantilesOf(effect)
	r.SendSeconds = sent.Sub(start).Seconds()
	r.TotalSeconds = end.Sub(start).Seconds()
	if r.TotalSeconds > 0 {
		r.RunsPerSec = float64(r.Completed+r.Failed) / r.TotalSeconds
	}
	if r.SendSeconds > 0 {
		r.ReqPerSec = float64(r.Requests) / r.SendSeconds
	}
	for _, p := range r.Problems {
		r.ProblemKinds[p.Kind]++
		switch p.Kind {
		case "lost":
			r.Lost++
		case "not accepted":
			r.NotAccepted++
		}
	}
	return r
}

// throughputNote says why the load test's runs/s is not BENCHMARKS.md's -dev figure,
// so that nobody reads the difference as a regression: the faults it injects, and what
// every run does here that the benchmark's does not.
func throughputNote(c *config) string {
	var faults []string
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', -1, 64) + "%" }
	if c.Lost > 0 {
		faults = append(faults, pct(c.Lost)+" of the answers lost")
	}
	if c.ShortShare > 0 {
		faults = append(faults, pct(c.ShortShare)+" short client timeouts")
	}
	if c.FlakyShare > 0 {
		faults = append(faults, pct(c.FlakyShare)+" of the runs' first downstream call answered 503 (a release and a retry)")
	}
	if c.Fail > 0 {
		faults = append(faults, pct(c.Fail)+" of the runs failing")
	}
	if c.SlowShare > 0 && c.SinkDelay > 0 {
		faults = append(faults, pct(c.SlowShare)+" of the runs calling a sink that waits "+c.SinkDelay.String())
	}
	if c.Chaos > 0 {
		faults = append(faults, "a worker SIGKILLed every "+c.Chaos.String())
	}
	on := "faults off"
	if len(faults) > 0 {
		on = "faults on: " + strings.Join(faults, ", ")
	}
	return "runs/s here is lower than BENCHMARKS.md's -dev figure by design, not a regression: " + on +
		"; every run is delivered " + strconv.Itoa(c.Dups) + " times, calls the sink over HTTP and is polled until verified, " +
		"while the benchmark runs no-op Go jobs without faults"
}

// evaluate sets OK: nothing is off.
func (r *report) evaluate(c *config) {
	r.OK = len(r.Problems) == 0 && r.Foreign == 0 && r.Accepted == c.Runs
}

func printReport(w io.Writer, c *config, r *report) error {
	if c.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	q := func(x quantiles) string {
		return fmt.Sprintf("p50 %.1f  p90 %.1f  p99 %.1f  max %.1f ms  (n=%d)", x.P50, x.P90, x.P99, x.Max, x.Count)
	}
	verdict := "VERIFIED: every accepted run took effect exactly once"
	if !r.OK {
		verdict = "FAILED: see problems below"
	}
	row("result", "%s", verdict)
	load := fmt.Sprintf("%s, %d runs × %d deliveries", r.Shape, r.Runs, r.Dups)
	if r.Rate != "" {
		load += ", " + r.Rate
	}
	row("load", "%s (seed %d) → %s", load, r.Seed, r.Target)
	if r.Workers > 0 {
		row("workers", "%d processes × %d, %d SIGKILLed and restarted", r.Workers, c.WorkerConcurrency, r.Kills)
	}
	row("throughput", "%.1f runs/s end to end (%.1fs to the last effect); %.1f requests/s while sending (%.1fs)",
		r.RunsPerSec, r.TotalSeconds, r.ReqPerSec, r.SendSeconds)
	row("  not a benchmark", "%s", r.Note)
	row("ingress latency", "%s", q(r.Ingress))
	row("  from intended send", "%s", q(r.FromIntended))
	row("accept → complete", "%s  (ledger created_at → finished_at)", q(r.AcceptToDone))
	row("first send → effect", "%s", q(r.SendToEffect))
	row("requests", "%d (%d retries)", r.Requests, r.Retries)
	row("runs", "%d accepted of %d: %d completed, %d failed (%d meant to fail), %d lost, %d not accepted",
		r.Accepted, r.Runs, r.Completed, r.Failed, r.MeantToFail, r.Lost, r.NotAccepted)
	row("  kinds", "%d keyed by Idempotency-Key, %d with a flaky downstream (503 first)", r.Keyed, r.Flaky)
	row("duplicates", "%d duplicate deliveries sent; %d answers said duplicate:true (a retry after a lost or timed-out answer is answered as a duplicate too, so this can exceed the deliveries); %d runs answered \"new\" more than once",
		r.DupsSent, r.Suppressed, r.MultiNew)
	row("effects", "%d applied, %d sink calls, %d downstream replays (same key, deduplicated), %d foreign, %d cut short (the caller went away mid-request)",
		r.Applied, r.SinkCalls, r.Replays, r.Foreign, r.CutShort)
	row("calls per run", "%s", histString(r.CallsPerRun))
	row("attempts per run", "%s", histString(r.AttemptsByRun))
	for _, k := range slices.Sorted(maps.Keys(r.Outcomes)) {
		row("  attempts: "+k, "%d", r.Outcomes[k])
	}
	for _, k := range slices.Sorted(maps.Keys(r.ProblemKinds)) {
		row("PROBLEM: "+k, "%d", r.ProblemKinds[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, p := range r.Problems {
		if i == 20 {
			fmt.Fprintf(w, "… and %d more (-json lists all)\n", len(r.Problems)-20)
			break
		}
		fmt.Fprintf(w, "  %s: run %d %s: %s\n", p.Kind, p.Run, p.RunID, p.Detail)
	}
	if r.WorkDir != "" && !r.OK {
		fmt.Fprintf(w, "evidence (ledger, logs): %s\n", r.WorkDir)
	}
	return nil
}

func histString(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// printScale prints the scaling mode's table, or its reports as JSON.
func printScale(w io.Writer, c *config, reps []*report) error {
	if c.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(reps)
	}
	for _, r := range reps {
		fmt.Fprintf(w, "── %d worker process(es) ──\n", r.Workers)
		if err := printReport(w, c, r); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workers\truns/s\tspeed-up\taccept→complete p50 ms\tp99 ms\tingress p99 ms\tverified\t")
	for _, r := range reps {
		fmt.Fprintf(tw, "%d\t%.1f\t%.2f×\t%.1f\t%.1f\t%.1f\t%v\t\n", r.Workers, r.RunsPerSec, r.RunsPerSec/reps[0].RunsPerSec,
			r.AcceptToDone.P50, r.AcceptToDone.P99, r.Ingress.P99, r.OK)
	}
	return tw.Flush()
}

// progress is a progress bar on stderr, or nothing.
type progress interface {
	Add(int) error
	Finish() error
}

type noProgress struct{}

func (noProgress) Add(int) error { return nil }
func (noProgress) Finish() error { return nil }

// progressOn reports whether progress bars are drawn on w (-progress).
func progressOn(c *config, w io.Writer) bool {
	if c.Progress == "auto" {
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				return true
			}
		}
	}
	return c.Progress == "on"
}

// newProgress returns a bar counting total things (what); rate shows things per second,
// meaningful for requests sent, not for runs seen terminal (they are polled in bulk).
func newProgress(c *config, w io.Writer, total int, what string, rate bool) progress {
	if !progressOn(c, w) {
		return noProgress{}
	}
	opts := []progressbar.Option{progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) })}
	if rate {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString("deliveries"), progressbar.OptionSetPredictTime(true))
	}
	return progressbar.NewOptions(total, opts...)
}
