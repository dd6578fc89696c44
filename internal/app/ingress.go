package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/worker"
)

// IngressFlags are the ingress's settings (DESIGN.md, "Configuration").
type IngressFlags struct {
	ServerFlags
	Topic, Namespace, Jobs, NamespaceHeader string
	MaxSkew, DemoDelay                      time.Duration
	MaxBody                                 int64
	Dev                                     bool
	DevConcurrency                          int
}

// IngressFlagSet declares the ingress's flags on a new flag set.
func IngressFlagSet(f *IngressFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("ingress", flag.ContinueOnError)
	f.declare(fs, "listen address (PORT when set; 127.0.0.1:8080 with -dev)", "; -dev: sqlite:///$PWD/runonce-dev.db",
		"how long run records are kept", "caller", "caller authentication: oidc or none (required, except with -dev)")
	fs.StringVar(&f.Topic, "topic", "", "pubsub://PROJECT/TOPIC to publish runs to (-dev: an in-process Pub/Sub)")
	fs.StringVar(&f.Namespace, "namespace", "", "namespace mixed into every key (e.g. my-project/us-central1)")
	fs.StringVar(&f.NamespaceHeader, "namespace-header", "", "a request header that, when sent, replaces -namespace for that request (only with authenticated callers)")
	fs.Int64Var(&f.MaxBody, "max-body", ingress.DefaultMaxBody, "largest accepted payload in bytes")
	fs.DurationVar(&f.MaxSkew, "max-skew", ingress.DefaultMaxSkew, "how far in the future a schedule time may be before it is refused as a forced run")
	fs.StringVar(&f.Jobs, "jobs", "", "optional jobs file: a job it does not name gets 404 (-dev: its targets run in-process too)")
	fs.BoolVar(&f.Dev, "dev", false, "the embedded all-in-one: embedded ledger, in-process Pub/Sub and workers, demo jobs, auth off")
	fs.DurationVar(&f.DemoDelay, "demo-delay", 2*time.Second, "how long the -dev demo job works before its effect")
	fs.IntVar(&f.DevConcurrency, "dev-concurrency", 8, "jobs the -dev in-process worker runs at once; 0 runs none (start cmd/worker processes against the printed Pub/Sub address instead)")
	return fs
}

// RunIngress runs the ingress command until ctx is done. The banner of -dev goes to
// stdout, logs to stderr.
func RunIngress(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var f IngressFlags
	fs := IngressFlagSet(&f)
	if err := config.Parse(fs, args, getenv); err != nil {
		return err
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	if err := config.CheckRetention(f.Retention, ledger.DefaultPickupTimeout); err != nil {
		return err
	}
	if f.MaxBody <= 0 || f.MaxSkew < 0 || f.DevConcurrency < 0 {
		return errors.New("-max-body must be positive, -max-skew and -dev-concurrency not negative")
	}
	if f.Dev {
		given := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
		return runDev(ctx, &f, given["addr"] || getenv(config.EnvName("addr")) != "" || getenv("PORT") != "", log, stdout)
	}
	if f.Ledger == "" || f.Topic == "" {
		return errors.New("-ledger and -topic are required (or -dev for the embedded all-in-one)")
	}
	authn, err := f.authenticator(ctx, log)
	if err != nil {
		return err
	}
	var jobNames []string
	if f.Jobs != "" {
		js, err := jobs.Load(f.Jobs)
		if err != nil {
			return err
		}
		jobNames = append([]string{}, jobs.Names(js)...)
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
	h, err := newIngress(&f, led, pub, authn, jobNames, project, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return err
	}
	log.Info("ingress listening", slog.String("addr", ln.Addr().String()), slog.String("topic", f.Topic),
		slog.String("auth", f.Auth), slog.String("namespace", f.Namespace))
	err = config.Serve(ctx, config.NewServer(f.Addr, h, log), ln, config.ShutdownGrace)
	log.Info("ingress stopped", slog.Any("error", err))
	return err
}

func newIngress(f *IngressFlags, led ledger.Ledger, pub ingress.Publisher, authn auth.Authenticator, jobNames []string, project string, log *slog.Logger) (*ingress.Handler, error) {
	metrics, err := obs.NewMetrics()
	if err != nil {
		return nil, err
	}
	return ingress.New(ingress.Config{
		Ledger: led, Publisher: pub, Namespace: f.Namespace, NamespaceHeader: f.NamespaceHeader,
		MaxBody: f.MaxBody, MaxSkew: f.MaxSkew, Jobs: jobNames, Retention: f.Retention, Auth: authn,
		TraceProject: project, Logger: log,
		Meter: metrics.Meter("github.com/runonce/runonce/pkg/ingress"), Metrics: metrics.Handler(),
	})
}

// The embedded mode's names.
const (
	DevProject      = "runonce-dev"
	DevTopic        = "runs"
	DevSubscription = "runs-worker"
	DevLedgerFile   = "runonce-dev.db"
	DevAddr         = "127.0.0.1:8080"
)

// runDev runs the embedded all-in-one: the embedded ledger, an in-process Pub/Sub, an
// in-process worker pool with the demo jobs, and the ingress, with auth off.
func runDev(ctx context.Context, f *IngressFlags, addrGiven bool, log *slog.Logger, stdout io.Writer) error {
	if !addrGiven {
		f.Addr = DevAddr // auth is off: listen on loopback only, unless told otherwise
	}
	ledgerURL := f.Ledger
	if ledgerURL == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		ledgerURL = "sqlite://" + filepath.ToSlash(filepath.Join(wd, DevLedgerFile))
	}
	led, err := ledger.Open(ctx, ledgerURL)
	if err != nil {
		return err
	}
	defer led.Close()
	ps, err := queue.NewInProcess(ctx, DevProject)
	if err != nil {
		return err
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(ctx, ps.Client, DevTopic); err != nil {
		return err
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, DevTopic, DevSubscription, &pubsubpb.Subscription{AckDeadlineSeconds: 30}); err != nil {
		return err
	}
	pub := queue.NewPublisher(ps.Client, DevTopic, nil)
	defer pub.Close()

	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return fmt.Errorf("-dev listens on %s: %w (choose another with -addr)", f.Addr, err)
	}
	base := "http://" + ln.Addr().String()
	mux := worker.NewMux()
	mux.Handle(DemoJob, demoHandler(f.DemoDelay, log))
	js := map[string]*jobs.Job{}
	if f.Jobs != "" {
		if js, err = jobs.Load(f.Jobs); err != nil {
			return err
		}
	}
	if _, ok := js[DemoHTTPJob]; !ok {
		u, err := url.Parse(base + "/dev/sink")
		if err != nil {
			return err
		}
		js[DemoHTTPJob] = &jobs.Job{Name: DemoHTTPJob, URL: u, Method: http.MethodPost, Timeout: 30 * time.Second, Auth: jobs.AuthNone}
	}
	closeTargets, err := targets.HandleJobs(ctx, mux, js, nil)
	if err != nil {
		return err
	}
	defer closeTargets()
	worker.MuxFromJobs(mux, js, &worker.HTTPTargetOptions{Token: GoogleIDTokens()})

	log.Warn("DEVELOPMENT MODE (-dev): authentication is OFF, Pub/Sub is in-process and lost on exit (the ledger is not), workers run in this process",
		slog.String("ledger", ledger.Redact(ledgerURL)), slog.String("pubsub", ps.Addr()))
	h, err := newIngress(f, led, pub, auth.None{}, mux.Jobs(), "", log)
	if err != nil {
		return err
	}
	sink := newDevSink(log)
	top := http.NewServeMux()
	top.Handle("/dev/sink", sink)
	top.Handle("/", h)

	workerAddr := "none (-dev-concurrency 0): start cmd/worker processes against the Pub/Sub above"
	var inProcess *WorkerSetup
	if f.DevConcurrency > 0 {
		workerLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		workerAddr = workerLn.Addr().String() + "   (/metrics, /readyz)"
		inProcess = &WorkerSetup{
			Flags: WorkerFlags{
				ServerFlags: ServerFlags{Addr: workerLn.Addr().String(), Retention: f.Retention},
				Concurrency: f.DevConcurrency, Lease: 30 * time.Second, Grace: 8 * time.Second,
				MaxAttempts: 5, RescueInterval: 10 * time.Second, MaxAckExtension: time.Minute,
				Subscription: ps.URL(DevSubscription), Topic: ps.URL(DevTopic),
			},
			Ledger: led, Handler: mux, Auth: auth.None{}, Log: log, Listener: workerLn,
			Subscriber: queue.NewSubscriber(ps.Client, DevSubscription, &queue.SubscriberOptions{Concurrency: f.DevConcurrency, ShutdownTimeout: 9 * time.Second}),
			Republish:  pub,
			NackDelay:  time.Second,
		}
	} else {
		log.Info("-dev-concurrency 0: no in-process worker; start workers with PUBSUB_EMULATOR_HOST and -subscription",
			slog.String("PUBSUB_EMULATOR_HOST", ps.Addr()), slog.String("subscription", ps.URL(DevSubscription)), slog.String("topic", ps.URL(DevTopic)))
	}
	printBanner(stdout, base, ledger.Redact(ledgerURL), ps.Addr(), workerAddr, mux.Jobs())
	g, gctx := errgroup.WithContext(ctx)
	if inProcess != nil {
		g.Go(func() error { return ServeWorker(gctx, inProcess) })
	}
	g.Go(func() error { return config.Serve(gctx, config.NewServer(f.Addr, top, log), ln, config.ShutdownGrace) })
	return g.Wait()
}

func printBanner(w io.Writer, base, ledgerURL, pubsubAddr, workerAddr string, jobNames []string) {
	now := time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)
	fmt.Fprintf(w, `
runonce is running in development mode (-dev): everything in this one process, auth off.

  ingress   %s
  ledger    %s   (kept across restarts)
  pubsub    %s   (in-process; PUBSUB_EMULATOR_HOST=%s, project %s)
  worker    %s
  jobs      %v

Start a run the way Cloud Scheduler does (post it twice: the second answer is a duplicate):

  curl -i -X POST %s/v1/jobs/%s \
    -H 'X-CloudScheduler-JobName: nightly-demo' \
    -H 'X-CloudScheduler-ScheduleTime: %s' \
    -d '{"hello":"world"}'

Then follow it: curl %s/v1/runs/RUN_ID   (RUN_ID is in the answer)

`, base, ledgerURL, pubsubAddr, pubsubAddr, DevProject, workerAddr, jobNames, base, DemoJob, now, base)
}
