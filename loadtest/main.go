// Command loadtest drives runonce the way schedulers do (bursts and steady rates, every
// run delivered several times, retries with backoff, lost answers, client timeouts), points
// its jobs at its own effect sink, injects downstream and process faults, and verifies at
// the end that every accepted run took effect exactly once. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is everything the flags say.
type config struct {
	Target, Job, Shape             string
	Runs, Dups                     int
	Rate                           vegeta.Rate
	DupSpread                      time.Duration
	IdemShare                      float64
	Lost, ShortShare               float64
	ShortTimeout, ClientTimeout    time.Duration
	Retries                        int
	MinBackoff, MaxBackoff         time.Duration
	MaxInflight, MaxRequests       int
	SinkDelay                      time.Duration
	SlowShare, FlakyShare, Fail    float64
	SinkAddr, SinkURL              string
	Spawn                          bool
	Workers, WorkerConcurrency     int
	Lease                          time.Duration
	Chaos                          time.Duration
	ChaosMax                       int
	Ledger, Topic, Subscription    string
	BinDir                         string
	KeepDir                        bool
	Scale                          []int
	Timeout, VerifyTimeout, Settle time.Duration
	Token, TokenCmd                string
	JSON, Strict, PrintJobs        bool
	Progress                       string
	Seed                           uint64
}

// maxRuns bounds -runs × -dups: the load test stops by itself and never floods a target.
const maxDeliveries = 1_000_000

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rate, scale string
	fs.StringVar(&c.Target, "target", "", "ingress base URL, e.g. http://127.0.0.1:8080 (required unless -spawn; any non-loopback URL must be given here explicitly)")
	fs.StringVar(&c.Job, "job", "loadtest-sink", "job name to post to (/v1/jobs/JOB); the deployment's jobs file must point it at the sink (see -print-jobs)")
	fs.StringVar(&c.Shape, "shape", "burst", "load shape: burst (every run due at the same tick, sent at once) or steady (open-loop at -rate)")
	fs.IntVar(&c.Runs, "runs", 500, "distinct runs (R)")
	fs.IntVar(&c.Dups, "dups", 3, "deliveries of each run (D): the first, then duplicates, half of them concurrent and half later")
	fs.StringVar(&rate, "rate", "200/s", "new runs per time unit for -shape steady (N/s, N/m or N)")
	fs.DurationVar(&c.DupSpread, "dup-spread", 3*time.Second, "later duplicates are sent up to this long after their run's first delivery")
	fs.Float64Var(&c.IdemShare, "idem-share", 0.2, "share of runs keyed by Idempotency-Key instead of the X-CloudScheduler-* headers")
	fs.Float64Var(&c.Lost, "lost", 0.1, "share of attempts whose answer is lost: the request is sent in full and the connection closed unread")
	fs.Float64Var(&c.ShortShare, "short-timeout-share", 0.05, "share of attempts sent with a client timeout shorter than the answer")
	fs.DurationVar(&c.ShortTimeout, "short-timeout", 3*time.Millisecond, "the short client timeout (each such attempt draws one up to this)")
	fs.DurationVar(&c.ClientTimeout, "client-timeout", 10*time.Second, "client timeout of an ordinary attempt (Cloud Scheduler's attempt deadline)")
	fs.IntVar(&c.Retries, "retries", 5, "retries of a delivery after a non-2xx, a timeout or a lost answer (Cloud Scheduler's retry count); injected faults never hit the last one")
	fs.DurationVar(&c.MinBackoff, "min-backoff", 100*time.Millisecond, "first retry delay, doubled at each retry")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", 5*time.Second, "longest retry delay")
	fs.IntVar(&c.MaxInflight, "max-inflight", 256, "requests in flight at once at most")
	fs.IntVar(&c.MaxRequests, "max-requests", 0, "hard bound on requests sent (0: runs × dups × (retries+1))")
	fs.DurationVar(&c.SinkDelay, "sink-delay", 20*time.Millisecond, "slow downstream: the sink waits this long before answering a slow run's call")
	fs.Float64Var(&c.SlowShare, "slow-share", 0.5, "share of runs whose downstream is slow (-sink-delay)")
	fs.Float64Var(&c.FlakyShare, "flaky-share", 0.1, "share of runs whose downstream answers 503 to the first call of each Idempotency-Key (the worker releases and retries with the same key)")
	fs.Float64Var(&c.Fail, "fail-share", 0.05, "share of runs meant to fail: the sink answers 400, the run must end failed with no effect")
	fs.StringVar(&c.SinkAddr, "sink-addr", "127.0.0.1:0", "where the effect sink listens")
	fs.StringVar(&c.SinkURL, "sink-url", "", "the sink's URL as the workers reach it (default http://SINK-ADDR/effect); for -print-jobs and remote workers")
	fs.BoolVar(&c.Spawn, "spawn", false, "build and start cmd/ingress -dev -dev-concurrency 0 and -workers cmd/worker processes on loopback")
	fs.IntVar(&c.Workers, "workers", 2, "-spawn: worker processes")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", 16, "-spawn: -concurrency of each worker")
	fs.DurationVar(&c.Lease, "lease", 6*time.Second, "-spawn: the workers' -lease (a killed worker's runs are taken over after it)")
	fs.DurationVar(&c.Chaos, "chaos", 0, "-spawn: SIGKILL a random worker at this interval and restart it (0: never)")
	fs.IntVar(&c.ChaosMax, "chaos-max", 0, "-spawn: kill at most this many times (0: no limit)")
	fs.StringVar(&c.Ledger, "ledger", "", "-spawn: run the ingress without -dev against this ledger URL (e.g. firestore://PROJECT, postgres://…); needs -topic, -subscription and PUBSUB_EMULATOR_HOST")
	fs.StringVar(&c.Topic, "topic", "", "-spawn with -ledger: pubsub://PROJECT/TOPIC (created on the emulator when missing)")
	fs.StringVar(&c.Subscription, "subscription", "", "-spawn with -ledger: pubsub://PROJECT/SUBSCRIPTION (created on the emulator when missing)")
	fs.StringVar(&c.BinDir, "bin-dir", "", "-spawn: directory with prebuilt ingress and worker binaries (default: go build them)")
	fs.BoolVar(&c.KeepDir, "keep", false, "-spawn: keep the work directory (ledger file, process logs)")
	fs.StringVar(&scale, "scale", "", "scaling mode: comma-separated worker counts (e.g. 1,2,4); runs the same load against a fresh -spawn stack for each")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound on the whole run, verification included")
	fs.DurationVar(&c.VerifyTimeout, "verify-timeout", 2*time.Minute, "how long to wait for every accepted run to be terminal")
	fs.DurationVar(&c.Settle, "settle", 2*time.Second, "after every run is terminal, wait this long for stray effect calls before counting")
	fs.StringVar(&c.Token, "token", "", "bearer token (OIDC ID token) sent to the ingress")
	fs.StringVar(&c.TokenCmd, "token-cmd", "", "command whose output is the bearer token, e.g. \"gcloud auth print-identity-token\"")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON on stdout")
	fs.BoolVar(&c.Strict, "strict", false, "count downstream replays (a 2nd successful call with an applied key) as violations")
	fs.BoolVar(&c.PrintJobs, "print-jobs", false, "print the jobs file that points -job at the sink (-sink-url or -sink-addr) and exit")
	fs.StringVar(&c.Progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on or off")
	fs.Uint64Var(&c.Seed, "seed", 0, "random seed of the load plan and the faults (0: from the clock)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	r, err := parseRate(rate)
	if err != nil {
		return nil, err
	}
	c.Rate = r
	if scale != "" {
		for s := range strings.SplitSeq(scale, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-scale %q: want worker counts like 1,2,4", scale)
			}
			c.Scale = append(c.Scale, n)
		}
		c.Spawn = true
	}
	return c, c.validate()
}

func (c *config) validate() error {
	shares := map[string]float64{"-idem-share": c.IdemShare, "-lost": c.Lost, "-short-timeout-share": c.ShortShare,
		"-slow-share": c.SlowShare, "-flaky-share": c.FlakyShare, "-fail-share": c.Fail}
	for name, v := range shares {
		if v < 0 || v > 1 {
			return fmt.Errorf("%s %v: want a share between 0 and 1", name, v)
		}
	}
	switch {
	case c.Shape != "burst" && c.Shape != "steady":
		return fmt.Errorf("-shape %q: want burst or steady", c.Shape)
	case c.Runs < 1 || c.Dups < 1:
		return errors.New("-runs and -dups must be at least 1")
	case c.Runs*c.Dups > maxDeliveries:
		return fmt.Errorf("-runs × -dups = %d: the bound is %d", c.Runs*c.Dups, maxDeliveries)
	case c.Retries < 0 || c.MaxInflight < 1 || c.MaxRequests < 0:
		return errors.New("-retries and -max-requests must not be negative, -max-inflight at least 1")
	case c.Timeout <= 0 || c.VerifyTimeout <= 0:
		return errors.New("-timeout and -verify-timeout must be positive")
	case !c.Spawn && c.Target == "" && !c.PrintJobs:
		return errors.New("give -target URL (the ingress) or -spawn")
	case c.Spawn && c.Target != "":
		return errors.New("-spawn starts its own ingress: drop -target")
	case c.Spawn && (c.Workers < 1 || c.WorkerConcurrency < 1):
		return errors.New("-workers and -worker-concurrency must be at least 1")
	case !c.Spawn && c.Chaos > 0:
		return errors.New("-chaos needs -spawn (it kills the worker processes it started)")
	case c.Ledger != "" && (c.Topic == "" || c.Subscription == ""):
		return errors.New("-ledger needs -topic and -subscription")
	case c.Token != "" && c.TokenCmd != "":
		return errors.New("give -token or -token-cmd, not both")
	case c.Progress != "auto" && c.Progress != "on" && c.Progress != "off":
		return fmt.Errorf("-progress %q: want auto, on or off", c.Progress)
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = c.Runs * c.Dups * (c.Retries + 1)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}

// parseRate reads "200/s", "600/m" or "200" (per second).
func parseRate(s string) (vegeta.Rate, error) {
	num, unit, found := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return vegeta.Rate{}, fmt.Errorf("-rate %q: want N/s, N/m or N", s)
	}
	per := time.Second
	if found {
		switch unit {
		case "s", "1s":
		case "m", "1m":
			per = time.Minute
		default:
			d, err := time.ParseDuration(unit)
			if err != nil || d <= 0 {
				return vegeta.Rate{}, fmt.Errorf("-rate %q: unknown unit %q", s, unit)
			}
			per = d
		}
	}
	return vegeta.Rate{Freq: n, Per: per}, nil
}

// run is the whole command; it returns the exit status: 0 verified clean, 1 something is
// off, 2 the load test itself could not run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if c.PrintJobs {
		url := c.SinkURL
		if url == "" {
			url = "http://" + c.SinkAddr + "/effect"
		}
		if err := writeJobs(stdout, c.Job, url); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 2
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.BinDir == "" {
		defer removeBuilt() // what this run built; binaries given by -bin-dir are the caller's
	}
	if len(c.Scale) > 0 {
		return runScale(ctx, c, stdout, stderr)
	}
	rep, err := runOnce(ctx, c, c.Workers, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if err := printReport(stdout, c, rep); err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if !rep.OK {
		return 1
	}
	return 0
}
