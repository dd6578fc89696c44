package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/memqueue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/worker"
)

// The embedded mode's names.
const (
	DevProject = "runonce-dev"
	DevTopic   = "runs"
	// DevSubscription is the subscription a worker joining -dev from another process
	// pulls: every run of a job the in-process worker does not run.
	DevSubscription = "runs-worker"
	// DevInProcessSubscription is the in-process worker's: the runs of its own jobs.
	DevInProcessSubscription = "runs-in-process"
	DevLedgerFile            = "runonce-dev.db"
	DevAddr                  = "127.0.0.1:8080"
	// DevPubSubPort is the default port of -dev's in-process Pub/Sub on 127.0.0.1: the
	// Pub/Sub emulator's, so that a joined worker's PUBSUB_EMULATOR_HOST stays right
	// across restarts of -dev.
	DevPubSubPort = 8085
)

// devAddr returns where -dev listens. Authentication is off, so it listens on loopback
// only: on DevAddr, or on PORT's port (PORT is often exported for other programs, and
// set on Cloud Run). Only an address given explicitly (-addr, or its RUNONCE_ADDR) may
// widen it.
func devAddr(f *IngressFlags, addrSource, port string) string {
	switch addrSource {
	case "-addr", config.EnvName("addr"):
		return f.Addr
	case "PORT":
		return net.JoinHostPort("127.0.0.1", port)
	}
	return DevAddr
}

// runDev runs the embedded all-in-one: the embedded ledger, an in-process worker pool
// with the demo jobs fed through an in-process memqueue.Topic, an in-process Pub/Sub
// (pstest) for the jobs of workers that join from other processes, and the ingress,
// with auth off.
func runDev(ctx context.Context, f *IngressFlags, addrSource, port string, log *slog.Logger, stdout io.Writer) error {
	f.Addr = devAddr(f, addrSource, port)
	ledgerURL := f.Ledger
	if ledgerURL == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		ledgerURL = "sqlite://" + filepath.ToSlash(filepath.Join(wd, DevLedgerFile))
	}
	fileJobs := map[string]*jobs.Job{}
	if f.Jobs != "" {
		var err error
		if fileJobs, err = jobs.Load(f.Jobs); err != nil {
			return err
		}
	}
	led, err := ledger.Open(ctx, ledgerURL)
	if err != nil {
		return err
	}
	defer led.Close()
	ps, err := pubsubtest.NewInProcessAt(ctx, DevProject, net.JoinHostPort("127.0.0.1", strconv.Itoa(f.DevPubSubPort)))
	if err != nil {
		return fmt.Errorf("%w (another -dev, or the Pub/Sub emulator, may use the port: choose another with -dev-pubsub-port, 0 for any free one)", err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(ctx, ps.Client, DevTopic); err != nil {
		return err
	}
	psPub := queue.NewPublisher(ps.Client, DevTopic, nil)
	defer psPub.Close()
	// The in-process worker's runs go through a memqueue.Topic: pstest's gRPC delivery caps a
	// worker at a few hundred runs a second, whatever the ledger.
	mem := memqueue.NewTopic(DevTopic)
	defer mem.Close()

	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return fmt.Errorf("-dev listens on %s: %w (choose another with -addr)", f.Addr, err)
	}
	base := "http://" + ln.Addr().String()

	// The in-process worker runs the demo jobs and the jobs file's targets; a job
	// without a target is left to a worker that joins from another process.
	inProcess := f.DevConcurrency > 0
	mux := worker.NewMux()
	if inProcess {
		mux.Handle(DemoJob, demoHandler(f.DemoDelay, log.With(slog.String("component", "demo"))))
		if _, ok := fileJobs[DemoHTTPJob]; !ok {
			u, err := url.Parse(base + "/dev/sink")
			if err != nil {
				return err
			}
			fileJobs[DemoHTTPJob] = &jobs.Job{Name: DemoHTTPJob, URL: u, Method: http.MethodPost, Timeout: 30 * time.Second, Auth: jobs.AuthNone}
		}
		closeTargets, err := targets.HandleJobs(ctx, mux, fileJobs, nil)
		if err != nil {
			return err
		}
		defer closeTargets()
		worker.MuxFromJobs(mux, fileJobs, &worker.HTTPTargetOptions{Token: worker.GoogleIDTokens()})
	}
	here := mux.Jobs()
	// The jobs it runs and the jobs file's; any job with -accept-any-job, or when there
	// are none to name (-dev-concurrency 0 without a jobs file: every run waits for a
	// worker that joins).
	var accepted []string // nil: any job
	if !f.AcceptAnyJob && (inProcess || f.Jobs != "") {
		accepted = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(here), jobs.Names(fileJobs)...))))
	}
	elsewhere := &pubsubpb.Subscription{AckDeadlineSeconds: 30}
	var pub queue.RunPublisher = psPub
	if inProcess {
		elsewhere.Filter = jobFilter(here, false)
		if err := mem.CreateSubscription(DevInProcessSubscription, nil); err != nil {
			return err
		}
		pub = queue.Route(func(m *queue.Message) bool { return slices.Contains(here, m.Identity.Job) }, mem.Publisher(), psPub)
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, DevTopic, DevSubscription, elsewhere); err != nil {
		return err
	}

	where := "workers run in this process"
	if !inProcess {
		where = "no worker runs in this process (-dev-concurrency 0)"
	}
	log.Warn("DEVELOPMENT MODE (-dev): authentication is OFF, Pub/Sub is in-process and lost on exit (the ledger is not), "+where,
		slog.String("ledger", ledger.Redact(ledgerURL)), slog.String("pubsub", ps.Addr()),
		slog.String("topic", ps.URL(DevTopic)), slog.String("subscription", ps.URL(DevSubscription)))
	if n, err := republishQueued(ctx, led, pub, f.Namespace, f.Retention); err != nil {
		log.Error("-dev: republishing the runs left queued by an earlier run of -dev failed; the rescuer republishes them after their pickup deadline", slog.Any("error", err))
	} else if n > 0 {
		log.Info("-dev: republished the runs left queued when -dev last stopped (their messages were lost with its Pub/Sub)", slog.Int("runs", n))
	}
	metrics, err := obs.NewServiceMetrics("ingress")
	if err != nil {
		return err
	}
	scheduled := fileJobs
	if f.Schedule && inProcess {
		scheduled = withDemoSchedule(fileJobs)
	}
	book, err := scheduleBook(ctx, scheduled, log)
	if err != nil {
		return err
	}
	if err := checkSchedule(f, book); err != nil {
		return err
	}
	h, err := newIngress(f, led, pub, auth.None{}, auth.None{}, accepted, book, "", metrics, nil, log)
	if err != nil {
		return err
	}
	loops, err := newTickLoops(&tickConfig{Book: book, Ledger: led, Namespace: f.Namespace, Meter: metrics.Meter(tickMeter), Fire: f.fire(h), Log: log})
	if err != nil {
		return err
	}
	sink := newDevSink(log.With(slog.String("component", "dev-sink")))
	top := http.NewServeMux()
	top.Handle("/dev/sink", sink)
	top.Handle("/", h)

	var setup *WorkerSetup
	workerAddr := ""
	if inProcess {
		workerLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		workerAddr = workerLn.Addr().String()
		sub, err := mem.Subscriber(DevInProcessSubscription, nil)
		if err != nil {
			return err
		}
		// The worker command's defaults, from its own flag set, with what -dev sets.
		var wf WorkerFlags
		if err := WorkerFlagSet(&wf).Parse(nil); err != nil {
			return err
		}
		wf.Addr, wf.Retention = workerAddr, f.Retention
		wf.Concurrency, wf.RescueInterval = f.DevConcurrency, 10*time.Second
		wf.Subscription, wf.Topic = sub.Name(), mem.Name()
		setup = &WorkerSetup{
			Flags: wf, Ledger: led, Handler: mux, Auth: auth.None{}, Log: log, Listener: workerLn,
			Subscriber: sub,
			Republish:  pub,
			NackDelay:  time.Second,
		}
	}
	printBanner(stdout, &banner{
		base: base, ledgerURL: ledgerURL, pubsubAddr: ps.Addr(), pubsubAnyPort: f.DevPubSubPort == 0, workerAddr: workerAddr,
		concurrency: f.DevConcurrency, demoDelay: f.DemoDelay, jobsFile: f.Jobs,
		here: here, fileJobs: fileJobs, accepted: accepted, fired: firedSchedules(f, book),
	})
	g, gctx := errgroup.WithContext(ctx)
	if setup != nil {
		g.Go(func() error { return ServeWorker(gctx, setup) })
	}
	g.Go(func() error { return loops.run(gctx) })
	g.Go(func() error { return config.Serve(gctx, config.NewServer(f.Addr, top, log), ln, config.ShutdownGrace) })
	return g.Wait()
}

// jobFilter returns a Pub/Sub subscription filter that matches the messages of names
// (in) or every other message (!in).
func jobFilter(names []string, in bool) string {
	parts := make([]string, len(names))
	for i, n := range names {
		op := "="
		if !in {
			op = "!="
		}
		parts[i] = fmt.Sprintf("attributes.%s %s %q", queue.AttrJob, op, n)
	}
	if in {
		return strings.Join(parts, " OR ")
	}
	return strings.Join(parts, " AND ")
}

// republishQueued publishes again the runs of namespace that are queued in the ledger:
// -dev's Pub/Sub lived in its process, so a run released when it last stopped (or
// claimed while no worker ran) lost its message with it. A duplicate message is
// harmless (the worker's claim deduplicates it); without this the run would wait for
// the rescuer, after its pickup deadline. It returns how many it republished.
func republishQueued(ctx context.Context, led *ledger.Ledger, pub queue.RunPublisher, namespace string, retention time.Duration) (int, error) {
	// Every queued run's deadline lies within the retention: list them all (no write).
	runs, err := led.ListRescue(ctx, &ledger.ListRescueParams{Limit: 1000, Now: time.Now().Add(retention)})
	if err != nil {
		return 0, fmt.Errorf("list queued runs: %w", err)
	}
	n := 0
	for _, r := range runs {
		if r.Status != ledger.StatusQueued || r.Namespace != namespace {
			continue
		}
		if _, err := pub.Publish(ctx, queue.RunMessage(r)); err != nil {
			return n, fmt.Errorf("republish run %s: %w", r.ID, err)
		}
		n++
	}
	return n, nil
}

// banner is what -dev prints on stdout when it is ready.
type banner struct {
	base, ledgerURL, pubsubAddr, workerAddr string
	pubsubAnyPort                           bool // -dev-pubsub-port 0
	// fired are the schedules runonce's own scheduler fires (-schedule), by job.
	fired       map[string]string
	concurrency int
	demoDelay   time.Duration
	jobsFile    string
	here        []string // jobs the in-process worker runs
	fileJobs    map[string]*jobs.Job
	accepted    []string // nil: any job
}

func printBanner(w io.Writer, b *banner) {
	now := time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)
	var s strings.Builder
	fmt.Fprintf(&s, "\nrunonce is running in development mode (-dev): everything in this one process, auth off.\n\n")
	fmt.Fprintf(&s, "  ingress   %s\n", b.base)
	fmt.Fprintf(&s, "  ledger    %s   (kept across restarts)\n", ledger.Redact(b.ledgerURL))
	port := "the same on every start: -dev-pubsub-port"
	if b.pubsubAnyPort {
		port = "a free port, new on every start: -dev-pubsub-port 0"
	}
	fmt.Fprintf(&s, "  pubsub    PUBSUB_EMULATOR_HOST=%s   (in-process, lost on exit; %s)\n", b.pubsubAddr, port)
	fmt.Fprintf(&s, "            topic %s, subscription for other workers %s\n",
		queue.Scheme+"://"+DevProject+"/"+DevTopic, queue.Scheme+"://"+DevProject+"/"+DevSubscription)
	if b.concurrency > 0 {
		fmt.Fprintf(&s, "  worker    in this process, %d jobs at once   (%s: /metrics, /readyz)\n", b.concurrency, b.workerAddr)
	} else {
		fmt.Fprintf(&s, "  worker    none in this process (-dev-concurrency 0): runs stay queued until a worker joins (below)\n")
	}
	fmt.Fprintf(&s, "  jobs\n")
	here := map[string]bool{}
	for _, n := range b.here {
		here[n] = true
	}
	for _, name := range b.accepted {
		fmt.Fprintf(&s, "    %-12s %s\n", name, b.describe(name, here[name]))
	}
	if b.accepted == nil {
		for _, name := range b.here {
			fmt.Fprintf(&s, "    %-12s %s\n", name, b.describe(name, true))
		}
		other := "any name"
		if len(b.here) > 0 {
			other = "any other name"
		}
		fmt.Fprintf(&s, "    (%s: every job is accepted and waits for a worker that runs it)\n", other)
	}

	job := DemoJob
	if b.concurrency == 0 {
		job = "JOB"
		if len(b.accepted) > 0 {
			job = b.accepted[0]
		}
	}
	if strings.HasPrefix(b.ledgerURL, "memory:") {
		fmt.Fprintf(&s, "\nNo other process can join: the ledger %s lives in this process (use the default, or -ledger sqlite:///PATH).\n", b.ledgerURL)
	} else {
		b.joinCommands(&s)
	}

	if len(b.fired) > 0 {
		fmt.Fprintf(&s, "\nThis process fires the schedules (-schedule):")
		for _, name := range slices.Sorted(maps.Keys(b.fired)) {
			fmt.Fprintf(&s, " %s %s", name, b.fired[name])
		}
		first := slices.Min(slices.Collect(maps.Keys(b.fired)))
		fmt.Fprintf(&s, ". Audit its ticks, backfill the missed ones, start a run by hand:\n\n")
		fmt.Fprintf(&s, "  runonce jobs ticks %[2]s --url %[1]s --from 1h\n  runonce jobs backfill %[2]s --url %[1]s --from 1h --to 0s --dry-run\n  runonce jobs run %[2]s --url %[1]s\n",
			b.base, first)
	}

	if b.concurrency > 0 {
		fmt.Fprintf(&s, "\nStart a run the way Cloud Scheduler does (post it twice: the second answer is a duplicate):\n\n")
	} else {
		fmt.Fprintf(&s, "\nStart a run the way Cloud Scheduler does (it stays queued until a worker that runs %s joins):\n\n", job)
	}
	fmt.Fprintf(&s, `  curl -i -X POST %s/v1/jobs/%s \
    -H 'X-CloudScheduler-JobName: nightly-demo' \
    -H 'X-CloudScheduler-ScheduleTime: %s' \
    -d '{"hello":"world"}'

Then follow it: curl %s/v1/runs/RUN_ID   (RUN_ID is in the answer)

`, b.base, job, now, b.base)
	io.WriteString(w, s.String())
}

// joinCommands writes how a worker in another process joins: the user's own program
// with Go handlers (docs/jobs.md, examples/userworker), which reads
// its settings from the same variables cmd/worker does, and cmd/worker, which runs only
// the targets of a jobs file.
func (b *banner) joinCommands(s *strings.Builder) {
	env := "PUBSUB_EMULATOR_HOST=" + b.pubsubAddr + " RUNONCE_LEDGER=" + shellQuote(ledger.Redact(b.ledgerURL)) + " \\\n" +
		"    RUNONCE_SUBSCRIPTION=" + queue.Scheme + "://" + DevProject + "/" + DevSubscription +
		" RUNONCE_TOPIC=" + queue.Scheme + "://" + DevProject + "/" + DevTopic + " \\\n"
	var goJobs, targets []string // jobs run elsewhere: by a Go handler, and targets
	for _, name := range b.accepted {
		switch j := b.fileJobs[name]; {
		case slices.Contains(b.here, name):
		case j == nil || !j.HasTarget():
			goJobs = append(goJobs, name)
		default:
			targets = append(targets, name)
		}
	}
	what := "the jobs this process does not run"
	switch {
	case b.accepted == nil:
		what = "every job (none runs in this process)"
	case len(goJobs) > 0:
		what = "the jobs without a target (" + strings.Join(goJobs, ", ") + ")"
	case b.concurrency > 0:
		what += `: none yet (name yours in a jobs file, {"jobs": {"mine": {}}}, and pass -jobs)`
	}
	fmt.Fprintf(s, "\n%s\n\n    %s      go run .\n", wrap(`Your own worker, a Go program with your handlers (docs/jobs.md, `+
		"examples/userworker), runs "+what+". Start it from its directory, in a second shell:"), env)
	fmt.Fprintf(s, "\n%s\n", wrap("cmd/worker has no Go handlers: it runs only the HTTP and Google Cloud API targets of a jobs file (-jobs), "+
		"and a job without a target that reaches it waits, nacked, for a worker that has one."))
	if len(targets) == 0 {
		return // none, or this process runs them
	}
	abs, err := filepath.Abs(b.jobsFile)
	if err != nil {
		abs = b.jobsFile
	}
	fmt.Fprintf(s, "\nTo run the jobs file's targets (%s), from this repository:\n\n    %s      go run ./cmd/worker -auth none -addr 127.0.0.1:0 -jobs %s\n",
		strings.Join(targets, ", "), env, shellQuote(abs))
}

// wrap breaks a paragraph of the banner into lines of at most 90 columns.
func wrap(text string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > 90 {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// describe says in a few words what runs a job of the banner.
func (b *banner) describe(name string, here bool) string {
	switch {
	case name == DemoJob && here:
		return fmt.Sprintf(`Go job: works %s, then one effect and a result; payload {"sleep": "30s"} works longer, {"fail": "permanent"} fails it`, b.demoDelay)
	case name == DemoHTTPJob && here && b.fileJobs[name] != nil && b.fileJobs[name].URL.String() == b.base+"/dev/sink":
		return "HTTP target: POSTs to " + b.base + "/dev/sink; GET it to see the calls per Idempotency-Key and run"
	}
	j := b.fileJobs[name]
	switch {
	case j == nil:
		return "Go job"
	case !j.HasTarget():
		return "no target: a Go handler in a worker that joins runs it"
	case j.Target != nil && here:
		return "Google Cloud API target " + j.Kind + " " + j.Target.Resource
	case j.Target != nil:
		return "Google Cloud API target " + j.Kind + " " + j.Target.Resource + " (run by a worker that joins)"
	case here:
		return "HTTP target " + j.Method + " " + j.URL.Redacted()
	}
	return "HTTP target " + j.Method + " " + j.URL.Redacted() + " (run by a worker that joins)"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/:._-+=@,%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
