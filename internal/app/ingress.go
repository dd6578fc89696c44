package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/ticks"
)

// IngressFlags are the ingress's settings (docs/design.md and docs/configuration.md).
type IngressFlags struct {
	ServerFlags
	Topic, Namespace, Jobs, NamespaceHeader string
	// Operators lists the emails that may retry, cancel, release and resolve runs and
	// see their payloads (-auth oidc); with -auth none everyone may.
	Operators          string
	MaxSkew, DemoDelay time.Duration
	MaxBody            int64
	// AcceptAnyJob accepts runs of any job name, not only the jobs file's: -jobs or it
	// is required (-dev: see runDev).
	AcceptAnyJob bool
	// Schedule fires the jobs file's schedules (runonce's own scheduler, package ticks).
	Schedule       bool
	Dev            bool
	DevConcurrency int
	// DevPubSubPort is the -dev in-process Pub/Sub's port on 127.0.0.1 (0: a free one).
	DevPubSubPort int
}

// IngressSummary is the ingress's one-line description (its -h).
const IngressSummary = "runonce's HTTP ingress. POST /v1/jobs/{job} claims the run in the ledger, publishes it\n" +
	"to Pub/Sub and answers 202 in milliseconds; every duplicate of a run is answered from the ledger.\n" +
	"Try it: ingress -dev runs the whole pipeline (ledger, Pub/Sub, workers, demo jobs) in this process."

// IngressFlagSet declares the ingress's flags on a new flag set.
func IngressFlagSet(f *IngressFlags) *flag.FlagSet {
	fs := config.NewFlagSet("ingress", IngressSummary)
	f.declare(fs, "listen address (:PORT when PORT is set; -dev: 127.0.0.1:8080, or 127.0.0.1:PORT, on loopback unless -addr is given)", "; -dev: sqlite:///$PWD/runonce-dev.db",
		"how long run records are kept", "caller", "caller authentication: oidc or none (required, except with -dev)")
	fs.StringVar(&f.Topic, "topic", "", "pubsub://PROJECT/TOPIC to publish runs to (-dev: an in-process Pub/Sub)")
	fs.StringVar(&f.Namespace, "namespace", "", "namespace mixed into every key (e.g. my-project/us-central1)")
	fs.StringVar(&f.Operators, "operators", "", "operator emails, comma-separated, who may retry, cancel, release and resolve runs and see their payloads (-auth oidc; they may also read runs); empty: nobody (-auth none, -dev: everyone)")
	fs.StringVar(&f.NamespaceHeader, "namespace-header", "", "a request header that, when sent, replaces -namespace for that request (only with authenticated callers)")
	fs.Int64Var(&f.MaxBody, "max-body", ingress.DefaultMaxBody, "largest accepted payload in bytes")
	fs.DurationVar(&f.MaxSkew, "max-skew", ingress.DefaultMaxSkew, "how far in the future a schedule time may be before it is refused as a forced run")
	fs.StringVar(&f.Jobs, "jobs", "", "jobs file: a job it does not name gets 404; this or -accept-any-job is required (-dev: its targets run in-process too, a job without a target waits for a worker that joins)")
	fs.BoolVar(&f.AcceptAnyJob, "accept-any-job", false, "accept runs of any job name instead of a jobs file's: a typo is answered 202, and its run fails when a worker's -unhandled-after passes (-dev -dev-concurrency 0 without -jobs: implied)")
	fs.BoolVar(&f.Schedule, "schedule", false, "fire the jobs file's schedules in this process, each tick claimed under the run ID Cloud Scheduler's delivery of it would have (replicas firing one tick make one run), for where there is no Cloud Scheduler; -dev: the demo job every minute")
	fs.BoolVar(&f.Dev, "dev", false, "the embedded all-in-one: embedded ledger, in-process Pub/Sub and workers, demo jobs, auth off")
	fs.DurationVar(&f.DemoDelay, "demo-delay", 2*time.Second, "how long the -dev demo job works before its effect")
	fs.IntVar(&f.DevPubSubPort, "dev-pubsub-port", DevPubSubPort, "the -dev in-process Pub/Sub's port on 127.0.0.1, the PUBSUB_EMULATOR_HOST of workers that join (the banner prints it); the same on every start, 0 picks a free one")
	fs.IntVar(&f.DevConcurrency, "dev-concurrency", 32, "jobs the -dev in-process worker runs at once; 0 runs none (a worker joins from another process: the banner prints the command)")
	return fs
}

// RunIngress runs the ingress command until ctx is done. The banner of -dev goes to
// stdout, logs to stderr.
func RunIngress(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	var f IngressFlags
	fs := IngressFlagSet(&f)
	fs.SetOutput(stderr)
	parsed, err := config.Parse(fs, args, env)
	if err != nil {
		return err
	}
	f.identify("runonce-ingress", env.Get)
	log, err := f.logger(stderr, f.Dev)
	if err != nil {
		return err
	}
	warnUnknown(log, "ingress", parsed)
	if err := config.CheckRetention(f.Retention, ledger.DefaultPickupTimeout); err != nil {
		return err
	}
	if f.MaxBody <= 0 || f.MaxSkew < 0 || f.DevConcurrency < 0 {
		return config.Usagef("-max-body must be positive, -max-skew and -dev-concurrency not negative")
	}
	if f.DevPubSubPort < 0 || f.DevPubSubPort > 65535 {
		return config.Usagef("-dev-pubsub-port %d is not a port (0 to 65535; 0 picks a free one)", f.DevPubSubPort)
	}
	if f.Dev {
		return runDev(ctx, &f, parsed.Source("addr"), env.Get("PORT"), log, stdout)
	}
	if f.Ledger == "" || f.Topic == "" {
		return config.Usagef("-ledger and -topic are required (or -dev for the embedded all-in-one)")
	}
	authn, err := f.authenticator(ctx, log)
	if err != nil {
		return err
	}
	operators, err := f.operators(ctx, authn)
	if err != nil {
		return err
	}
	switch {
	case f.Jobs == "" && !f.AcceptAnyJob:
		return config.Usagef("-jobs or -accept-any-job is required: without a jobs file the ingress would answer 202 for any job name, " +
			"typos included, whose runs no worker claims until a worker's -unhandled-after fails them")
	case f.Jobs != "" && f.AcceptAnyJob:
		return config.Usagef("-jobs and -accept-any-job are both given: the jobs file lists the jobs the ingress accepts, -accept-any-job accepts any; give one")
	}
	var jobNames []string // nil: any job (-accept-any-job)
	var js map[string]*jobs.Job
	if f.Jobs != "" {
		if js, err = jobs.Load(f.Jobs); err != nil {
			return err
		}
		jobNames = append([]string{}, jobs.Names(js)...)
	}
	book, err := scheduleBook(ctx, js, log)
	if err != nil {
		return err
	}
	if err := checkSchedule(&f, book); err != nil {
		return err
	}
	project, _, err := queue.ParseURL(f.Topic)
	if err != nil {
		return err
	}
	led, err := ledger.Open(ctx, f.Ledger)
	if err != nil {
		return err
	}
	defer led.Close()
	pub, err := queue.OpenPublisher(ctx, f.Topic, &queue.PublisherOptions{Client: queue.ClientOptions{Tracing: true}})
	if err != nil {
		return err
	}
	defer pub.Close()
	metrics, err := obs.NewMetricsExport(ctx, f.export(project))
	if err != nil {
		return err
	}
	defer shutdownMetrics(metrics, log)
	tracing, err := obs.NewTracing(ctx, f.export(project), nil)
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, log)
	log = obs.WithTraceFields(log, project)
	h, err := newIngress(&f, led, pub, authn, operators, jobNames, book, project, metrics, tracing, log)
	if err != nil {
		return err
	}
	loops, err := newTickLoops(&tickConfig{Book: book, Ledger: led, Namespace: f.Namespace, Meter: metrics.Meter(tickMeter), Fire: f.fire(h), Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return err
	}
	log.Info("ingress listening", slog.String("addr", ln.Addr().String()), slog.String("topic", f.Topic),
		slog.String("auth", f.Auth), slog.String("namespace", f.Namespace), slog.Any("scheduled_jobs", book.Jobs()), slog.Bool("schedule", f.Schedule))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return loops.run(gctx) })
	g.Go(func() error { return config.Serve(gctx, config.NewServer(f.Addr, h, log), ln, config.ShutdownGrace) })
	if err := g.Wait(); err != nil {
		return err // config.Main prints it
	}
	log.Info("ingress stopped")
	return nil
}

// newIngress builds the ingress handler for the jobs jobNames, or any job when it is
// nil; tracing (nil: none) spans each request, its ledger calls and its publish.
func newIngress(f *IngressFlags, led *ledger.Ledger, pub queue.RunPublisher, authn, operators auth.Authenticator, jobNames []string, book *ticks.Book, project string, metrics *obs.Metrics, tracing *obs.Tracing, log *slog.Logger) (*ingress.Handler, error) {
	topic := f.Topic
	if _, id, err := queue.ParseURL(f.Topic); err == nil {
		topic = id
	}
	return ingress.New(&ingress.Config{
		Ledger: instrument(led, tracing, metrics), Publisher: &tracedPublisher{RunPublisher: pub, tracer: tracing.Tracer(tracerName), topic: topic},
		TracerProvider: tracing.TracerProvider(), Namespace: f.Namespace, NamespaceHeader: f.NamespaceHeader,
		MaxBody: f.MaxBody, MaxSkew: f.MaxSkew, Jobs: jobNames, AcceptAnyJob: jobNames == nil, Retention: f.Retention, Auth: authn, Operators: operators,
		TraceProject: project, Logger: log, Schedules: book,
		Meter: metrics.Meter("github.com/runonce/runonce/pkg/ingress"), Metrics: metrics.Handler(),
	})
}

// tickMeter is the meter of the missed-tick counter (ticks.MetricMissed).
const tickMeter = "github.com/runonce/runonce/pkg/ticks"

// fire is -schedule's FireFunc through h; nil without -schedule.
func (f *IngressFlags) fire(h *ingress.Handler) ticks.FireFunc {
	if !f.Schedule {
		return nil
	}
	return fireThrough(h)
}

// operators returns the authenticator of -operators: the callers' (everyone) under
// -auth none; under -auth oidc the same audience and issuers with the operators' allow
// list, or nil (nobody) when -operators is empty.
func (f *IngressFlags) operators(ctx context.Context, authn auth.Authenticator) (auth.Authenticator, error) {
	if _, none := authn.(auth.None); none {
		return authn, nil
	}
	allow := config.SplitList(f.Operators)
	if len(allow) == 0 {
		return nil, nil
	}
	return auth.NewOIDC(ctx, auth.OIDCConfig{
		Audience: f.Audience, Allow: allow, Issuers: config.SplitList(f.OIDCIssuer), JWKSURL: f.OIDCJWKSURL,
	})
}
