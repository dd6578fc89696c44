package app

import (
	"cmp"
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/ticks"
	"github.com/runonce/runonce/pkg/worker"
)

// ServerFlags are the settings both commands share: where they listen, the ledger, the
// retention, how callers authenticate, and the log level.
type ServerFlags struct {
	Addr, Ledger, Auth, Audience, Allow, OIDCIssuer, OIDCJWKSURL, LogLevel string
	Retention                                                              time.Duration
	MetricsExport, TraceExport                                             string
	// Service is the service's name in exported telemetry (not a flag): Cloud Run's
	// K_SERVICE, or the binary's name.
	Service string
	// OnGoogleCloud is set where a metadata server answers (K_SERVICE is set).
	OnGoogleCloud bool
}

// declare declares the shared flags; the usage strings name what differs.
func (s *ServerFlags) declare(fs *flag.FlagSet, addrUsage, ledgerUsage, retentionUsage, callers, authUsage string) {
	fs.StringVar(&s.Addr, "addr", ":8080", addrUsage)
	fs.StringVar(&s.Ledger, "ledger", "", "ledger URL (sqlite:///PATH, postgres://…, firestore://PROJECT[/DATABASE], spanner://projects/P/instances/I/databases/D, redis://HOST:PORT/DB, memory://NAME)"+ledgerUsage)
	fs.DurationVar(&s.Retention, "retention", ledger.DefaultRetention, retentionUsage)
	fs.StringVar(&s.Auth, "auth", "", authUsage)
	fs.StringVar(&s.Audience, "audience", "", "the audience "+callers+" ID tokens must carry (-auth oidc)")
	fs.StringVar(&s.Allow, "allow", "", "allowed "+callers+" emails, comma-separated (-auth oidc)")
	fs.StringVar(&s.OIDCIssuer, "oidc-issuer", "", "accepted ID token issuers, comma-separated (default Google's)")
	fs.StringVar(&s.OIDCJWKSURL, "oidc-jwks-url", "", "the issuer's key set URL (default Google's)")
	fs.StringVar(&s.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&s.TraceExport, "trace-export", obs.ExportNone, "where traces go: none, gcp (Cloud Trace) or otlp (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT); the trace context is carried either way")
	fs.StringVar(&s.MetricsExport, "metrics-export", obs.ExportPrometheus, "where metrics go besides /metrics: prometheus (/metrics only) or gcp (also Cloud Monitoring, every minute)")
}

// identify sets Service (K_SERVICE, else name) and OnGoogleCloud from the environment.
func (s *ServerFlags) identify(name string, getenv func(string) string) {
	s.Service = cmp.Or(getenv("K_SERVICE"), name)
	s.OnGoogleCloud = getenv("K_SERVICE") != ""
}

// export is where this process's telemetry goes; project is the Google Cloud project of
// its topic or subscription ("": the credentials').
func (s *ServerFlags) export(project string) obs.Export {
	return obs.Export{Metrics: s.MetricsExport, Traces: s.TraceExport, Service: cmp.Or(s.Service, "runonce"), Project: project, OnGoogleCloud: s.OnGoogleCloud}
}

// logger returns the logger at -log-level: JSON in Cloud Logging's format, or text when
// readable is set and stderr is a terminal (-dev, for a person).
func (s *ServerFlags) logger(stderr io.Writer, readable bool) (*slog.Logger, error) {
	level, err := obs.ParseLevel(s.LogLevel)
	if err != nil {
		return nil, err
	}
	if readable && obs.IsTerminal(stderr) {
		return obs.NewTextLogger(stderr, level), nil
	}
	return obs.NewLogger(stderr, level), nil
}

// warnUnknown warns about RUNONCE_* variables that name no flag of command, each with
// the variable it likely misspells.
func warnUnknown(log *slog.Logger, command string, p *config.Parsed) {
	if len(p.Unknown) > 0 {
		log.Warn(config.UnknownWarning(command), slog.Any("variables", p.UnknownList()))
	}
}

// WorkerFlags are the worker's settings (docs/design.md and docs/configuration.md).
type WorkerFlags struct {
	ServerFlags
	Subscription, Topic, Jobs string
	// Namespace is the namespace whose ticks the worker checks for missed ones (the
	// ingress's -namespace), when its jobs file has scheduled jobs.
	Namespace                    string
	Lease, Grace, RescueInterval time.Duration
	MaxAckExtension              time.Duration
	// UnhandledAfter: a run of a job no worker runs is failed once it has waited this
	// long (worker.Config.UnhandledAfter; 0: never).
	UnhandledAfter           time.Duration
	Concurrency, MaxAttempts int
	// Push serves POST /v1/push, for a Pub/Sub push subscription.
	Push bool
}

// WorkerSummary is the worker's one-line description (its -h).
const WorkerSummary = "runs runonce jobs. It pulls runs from a Pub/Sub subscription (or is pushed them), holds a\n" +
	"fenced, renewed lease on each while its job works, and completes the run or releases it for a retry;\n" +
	"its jobs are the jobs file's HTTP targets (a worker binary of your own adds Go handlers)."

// WorkerFlagSet declares the worker's flags on a new flag set.
func WorkerFlagSet(f *WorkerFlags) *flag.FlagSet {
	fs := config.NewFlagSet("worker", WorkerSummary)
	f.declare(fs, "listen address for /healthz, /readyz, /metrics and, with -push, POST /v1/push (PORT when set)", "",
		"how long run and effect records are kept; messages older than this are dropped",
		"push caller", "push caller authentication: oidc or none (required)")
	fs.StringVar(&f.Subscription, "subscription", "", "pubsub://PROJECT/SUBSCRIPTION to pull from (pull mode)")
	fs.BoolVar(&f.Push, "push", false, "serve POST /v1/push for a Pub/Sub push subscription (push mode; needs -auth oidc)")
	fs.StringVar(&f.Topic, "topic", "", "pubsub://PROJECT/TOPIC where the rescuer republishes lost runs; empty: no rescuer")
	fs.StringVar(&f.Jobs, "jobs", "", "jobs file: the HTTP and Google Cloud API targets this worker runs")
	fs.StringVar(&f.Namespace, "namespace", "", "the ingress's -namespace: the runs whose ticks this worker checks for missed ones, when its jobs file has jobs with schedule or scheduler_job")
	fs.IntVar(&f.Concurrency, "concurrency", 8, "jobs run at once by this process")
	fs.DurationVar(&f.Lease, "lease", 30*time.Second, "lease length; renewed every third of it")
	fs.DurationVar(&f.Grace, "grace", 8*time.Second, "shutdown grace before running jobs are cancelled and released")
	fs.IntVar(&f.MaxAttempts, "max-attempts", 5, "attempts of a run before it fails, for jobs that set no max_attempts")
	fs.DurationVar(&f.RescueInterval, "rescue-interval", 30*time.Second, "how often the rescuer looks for runs to republish")
	fs.DurationVar(&f.UnhandledAfter, "unhandled-after", worker.DefaultUnhandledAfter, "a run of a job this worker has no handler for is failed, naming the job, once it has waited this long for a worker that runs the job (since its creation, last claim or retry); before, it is nacked for another worker; 0: never")
	fs.DurationVar(&f.MaxAckExtension, "max-ack-extension", 60*time.Second, "longest single ack-deadline extension: a crashed worker's messages come back within it (10s to 600s)")
	return fs
}

// authenticator returns the authenticator -auth, -audience, -allow and the OIDC flags
// describe. An empty -auth is refused: running without authentication must be explicit.
func (s *ServerFlags) authenticator(ctx context.Context, log *slog.Logger) (auth.Authenticator, error) {
	switch s.Auth {
	case "none":
		log.Warn("authentication is off (-auth none): anyone who can reach this service can call it")
		return auth.None{}, nil
	case "oidc":
		return auth.NewOIDC(ctx, auth.OIDCConfig{
			Audience: s.Audience, Allow: config.SplitList(s.Allow), Issuers: config.SplitList(s.OIDCIssuer), JWKSURL: s.OIDCJWKSURL,
		})
	case "":
		return nil, config.Usagef("-auth is required: -auth oidc with -audience and -allow, or -auth none to run without authentication")
	}
	return nil, config.Usagef("-auth %q: want oidc or none", s.Auth)
}

// RunWorker runs the worker command until ctx is done: flags → worker.Config → Run.
func RunWorker(ctx context.Context, args []string, env config.Env, _, stderr io.Writer) error {
	var f WorkerFlags
	fs := WorkerFlagSet(&f)
	fs.SetOutput(stderr)
	parsed, err := config.Parse(fs, args, env)
	if err != nil {
		return err
	}
	f.identify("runonce-worker", env.Get)
	log, err := f.logger(stderr, false)
	if err != nil {
		return err
	}
	warnUnknown(log, "worker", parsed)
	log = obs.WithTraceFields(log, f.project())
	switch {
	case f.Ledger == "":
		return config.Usagef("-ledger is required")
	case f.Concurrency < 1: // a zero in worker.Config means its default
		return config.Usagef("-concurrency %d: must be at least 1", f.Concurrency)
	case f.Grace <= 0 || f.Lease <= 0:
		return config.Usagef("-grace and -lease must be positive")
	case f.UnhandledAfter < 0:
		return config.Usagef("-unhandled-after %s: must not be negative (0: never fail a run of a job no worker runs)", f.UnhandledAfter)
	case f.Subscription == "" && !f.Push:
		return config.Usagef("no way to receive runs: give -subscription (pull) or -push (push), or both")
	case f.Push && f.Auth == "none":
		return config.Usagef("-push with -auth none would let anyone who reaches this port run any job with any payload: " +
			"push needs -auth oidc with -audience and -allow (the push subscription's service account)")
	}
	authn, err := f.authenticator(ctx, log)
	if err != nil {
		return err
	}
	tracing, err := obs.NewTracing(ctx, f.export(f.project()), nil)
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, log)
	mux := worker.NewMux()
	var book *ticks.Book
	if f.Jobs != "" {
		js, err := jobs.Load(f.Jobs)
		if err != nil {
			return err
		}
		if book, err = scheduleBook(ctx, js, log); err != nil {
			return err
		}
		closeTargets, err := targets.HandleJobs(ctx, mux, js, nil)
		if err != nil {
			return err
		}
		defer closeTargets()
		worker.MuxFromJobs(mux, js, &worker.HTTPTargetOptions{Token: worker.GoogleIDTokens(), Client: &http.Client{Transport: tracing.Transport(nil)}})
	}
	led, err := ledger.Open(ctx, f.Ledger)
	if err != nil {
		return err
	}
	defer led.Close()
	return ServeWorker(ctx, &WorkerSetup{Flags: f, Ledger: led, Handler: mux, Auth: authn, Log: log, Tracing: tracing, Schedules: book})
}

// WorkerSetup is what ServeWorker runs: the parsed flags and the parts built from them.
type WorkerSetup struct {
	Flags   WorkerFlags
	Ledger  *ledger.Ledger
	Handler worker.Handler
	// Auth authenticates push deliveries (with Flags.Push).
	Auth auth.Authenticator
	Log  *slog.Logger
	// Listener, when set, replaces listening on Flags.Addr.
	Listener net.Listener
	// Subscriber and Republish, when set, replace opening Flags.Subscription and
	// Flags.Topic (the embedded mode passes in-process ones).
	Subscriber worker.Subscriber
	Republish  queue.RunPublisher
	// NackDelay is passed to the worker (the embedded mode's Pub/Sub has no retry policy).
	NackDelay time.Duration
	// Tracing spans each attempt and its ledger calls; nil: none (the trace context is
	// still carried).
	Tracing *obs.Tracing
	// Schedules, when set, are the jobs file's schedules, whose ticks of Flags.Namespace
	// the worker checks for missed ones (ticks.Checker).
	Schedules *ticks.Book
}

// project is the Google Cloud project of the worker's subscription or topic ("" when
// neither names one).
func (f *WorkerFlags) project() string {
	for _, u := range []string{f.Subscription, f.Topic} {
		if p, _, err := queue.ParseURL(u); err == nil {
			return p
		}
	}
	return ""
}

// config is the worker.Config the flags describe.
func (f *WorkerFlags) config() worker.Config {
	return worker.Config{
		Lease: f.Lease, MaxAttempts: f.MaxAttempts, Retention: f.Retention, Grace: f.Grace,
		Concurrency: f.Concurrency, RescueInterval: f.RescueInterval, UnhandledAfter: unhandledAfter(f.UnhandledAfter),
	}
}

// unhandledAfter is worker.Config.UnhandledAfter for -unhandled-after: 0 means never,
// which the Config spells negative.
func unhandledAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// ServeWorker runs a worker (worker.Run) and serves its Handler (health, readiness and,
// with -push, push delivery behind -auth) and /metrics, until ctx is done. A second
// signal (config.Hurry) cancels running jobs at once instead of after the grace.
func ServeWorker(ctx context.Context, s *WorkerSetup) error {
	f, log := s.Flags, s.Log.With(slog.String("component", "worker"))
	metrics, err := obs.NewMetricsExport(ctx, f.export(f.project()))
	if err != nil {
		return err
	}
	defer shutdownMetrics(metrics, log)
	cfg := f.config()
	cfg.Ledger, cfg.Handler, cfg.Logger = instrument(s.Ledger, s.Tracing, metrics), s.Handler, log
	cfg.TracerProvider, cfg.Meter = s.Tracing.TracerProvider(), metrics.Meter("github.com/runonce/runonce/pkg/worker")
	cfg.NackDelay = s.NackDelay
	if f.Push {
		cfg.PushAuth = auth.Middleware(s.Auth)
	}
	if s.Subscriber != nil {
		cfg.Subscriber = s.Subscriber
	} else if f.Subscription != "" {
		sub, err := queue.OpenSubscriber(ctx, f.Subscription, &queue.SubscriberOptions{
			MaxDurationPerAckExtension: f.MaxAckExtension, Client: queue.ClientOptions{Tracing: true},
		})
		if err != nil {
			return err
		}
		defer sub.Close()
		cfg.Subscriber = sub
	}
	if s.Republish != nil {
		cfg.Republish = s.Republish
	} else if f.Topic != "" {
		pub, err := queue.OpenPublisher(ctx, f.Topic, nil)
		if err != nil {
			return err
		}
		defer pub.Close()
		cfg.Republish = pub
	}
	w, err := worker.New(&cfg)
	if err != nil {
		return err
	}
	if hurry := config.Hurry(ctx); hurry != nil {
		stop := context.AfterFunc(ctx, func() {
			select {
			case <-hurry:
				log.Warn("stopping now: running jobs are cancelled and their runs released")
				w.CancelJobs()
			case <-time.After(f.Grace):
			}
		})
		defer stop()
	}
	h := http.NewServeMux()
	h.Handle("GET /metrics", metrics.Handler())
	h.Handle("/", w.Handler())
	ln := s.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", f.Addr); err != nil {
			return err
		}
	}
	var names []string
	if r, ok := s.Handler.(worker.Router); ok {
		names = r.Jobs()
	}
	log.Info("worker listening", slog.String("addr", ln.Addr().String()), slog.String("subscription", f.Subscription),
		slog.Int("concurrency", f.Concurrency), slog.Duration("lease", f.Lease), slog.Duration("grace", f.Grace),
		slog.Any("jobs", names), slog.Bool("rescuer", cfg.Republish != nil))
	loops, err := newTickLoops(&tickConfig{Book: s.Schedules, Ledger: s.Ledger, Namespace: f.Namespace, Meter: metrics.Meter(tickMeter), Log: log})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	srv := config.NewServer(f.Addr, h, log)
	srv.WriteTimeout = 0 // a push request lasts as long as its job
	g.Go(func() error { return config.Serve(gctx, srv, ln, f.Grace+time.Second) })
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return loops.run(gctx) })
	// worker.Run logs its own stop; an error is the caller's to print.
	return g.Wait()
}

// shutdownTracing exports the spans still batched.
func shutdownTracing(t *obs.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("traces: the last export failed", slog.Any("error", err))
	}
}

// shutdownMetrics exports the last points (Cloud Run leaves a few seconds after SIGTERM).
func shutdownMetrics(m *obs.Metrics, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		log.Warn("metrics: the last export failed", slog.Any("error", err))
	}
}
