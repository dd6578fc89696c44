package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/sethvargo/go-retry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/runonce/runonce/pkg/internal/logonce"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// Subscriber is where Run pulls deliveries from; *queue.Subscriber is one. Another
// transport, or a test's, plugs in by implementing it.
type Subscriber interface {
	// Receive calls f for each delivery until ctx is done, at most o.Concurrency at
	// once, then waits for running calls at most o.ShutdownTimeout and returns. It keeps
	// a delivery's ack deadline extended for up to o.MaxExtension.
	Receive(ctx context.Context, o *queue.ReceiveOptions, f func(context.Context, *queue.Delivery)) error
	// Retention is the subscription's message retention: how long a message can still
	// be delivered.
	Retention(ctx context.Context) (time.Duration, error)
	// Ping checks that the subscription is reachable, for readiness.
	Ping(ctx context.Context) error
}

var _ Subscriber = (*queue.Subscriber)(nil)

// Config configures a Worker. Zero values mean the documented defaults.
type Config struct {
	// Ledger records runs and effects (ledger.Open, ledger.New). Required. The worker
	// bounds each of its calls by LedgerTimeout (ledger.Ledger.WithTimeout).
	Ledger *ledger.Ledger
	// Handler runs jobs. A handler that implements Router (a *Mux does) gives per-job
	// bounds and says which jobs it runs; a delivery of a job it does not run is not an
	// attempt (see NoHandlerDelay). Required.
	Handler Handler
	// Subscriber is where Run pulls deliveries from. Nil: no pull; deliveries come by
	// push (Handler) or Process.
	Subscriber Subscriber
	// Republish is where the rescuer republishes lost runs; nil disables the rescuer
	// (the sweeper still runs).
	Republish queue.RunPublisher
	// Grace is how long running jobs may go on once Run's context ends; then their
	// contexts are cancelled with ErrShutdown and their runs released. Defaults to 8s.
	// Cloud Run kills an instance 10s after SIGTERM: stay below that there.
	Grace time.Duration
	// Concurrency bounds the jobs run at once, pulled (the subscriber's callbacks) and
	// pushed (one more push delivery is answered 429: Pub/Sub redelivers it after its
	// backoff). Defaults to 8.
	Concurrency int
	// PushAuth authenticates push deliveries: Handler serves POST /v1/push only when it
	// is set. It wraps the push endpoint (e.g. one built from pkg/auth with
	// auth.Middleware); NoAuth serves it to anyone who can reach it.
	PushAuth func(http.Handler) http.Handler
	// MessageRetention is the message retention of the subscription that pushes to this
	// worker, for the retention check when there is no Subscriber (whose own retention
	// is read). Defaults to queue.DefaultSubscriptionRetention.
	MessageRetention time.Duration
	// UnsafeRetention skips the check that Retention outlasts every message that can
	// still deliver a run. Only for tests of expiry: a record deleted before its last
	// delivery lets that delivery run its run twice.
	UnsafeRetention bool
	// NoHandlerDelay is how long a delivery of a job Handler does not run is held before
	// it is nacked (no attempt is counted; another worker, or this one once it knows the
	// job, runs it). Defaults to 10s.
	NoHandlerDelay time.Duration
	// UnhandledAfter bounds how long a run of a job no worker runs waits: a delivery of
	// a job Handler does not run, of a run that has waited longer than this for a worker
	// (since the latest of its creation, its last claim or operator action, and the time
	// it became due, as its record tells), is claimed and failed for good, naming the
	// job; before that it is nacked as NoHandlerDelay says. The run's age is judged from
	// the message until it is past the bound, so younger runs cost no ledger read.
	// Defaults to DefaultUnhandledAfter; negative: never (such a run stays queued until a
	// worker that runs its job takes it).
	UnhandledAfter time.Duration
	// Lease is the lease a claim takes; it is renewed every third of it (a failed
	// renewal is tried again sooner, from a thirtieth of it on). Defaults to 30s.
	Lease time.Duration
	// MaxAttempts bounds the attempts of a run whose job sets none. Defaults to 5.
	MaxAttempts int
	// Retention is how long records are kept after their last write, and the age past
	// which a message is dropped. Defaults to ledger.DefaultRetention.
	Retention time.Duration
	// PickupTimeout is how long a released or rescued run may wait for a worker before
	// the rescuer republishes it. Defaults to 5m.
	PickupTimeout time.Duration
	// FinishTimeout bounds the retries of the write that completes, releases or fails a
	// run after its job returned. Defaults to 10s.
	FinishTimeout time.Duration
	// LedgerTimeout bounds each ledger call (claim, renew, effects, finishing writes,
	// the rescuer's list, rescue and sweep) and each republish. Defaults to 10s. A worker
	// claim and a renewal are bounded sooner by what their lease leaves: until the point
	// where the lease keeper would self-fence (five sixths of the lease after the claim
	// or the last renewal was sent), past which a claim could not start its job and a
	// renewal comes too late.
	LedgerTimeout time.Duration
	// MaxRunTime bounds how long a Go handler runs (a job's HandleOptions.MaxRunTime
	// overrides it): then its context is cancelled with ErrMaxRunTime, its lease is no
	// longer renewed and the run is released for a retry. A handler that ignores its
	// context loses the run when the lease runs out; its writes are then fenced.
	// Defaults to DefaultMaxRunTime.
	MaxRunTime time.Duration
	// MaxRetryAfter bounds the delay a job asks for (RetryAfter, or an HTTP target's
	// Retry-After): a longer one is cut to it, so that the retry stays well inside the
	// retention. Defaults to DefaultMaxRetryAfter, or half the retention when that is
	// shorter; it may not exceed the retention.
	MaxRetryAfter time.Duration
	// NackDelay, when positive, delays the nack of a held run (or a released one) by up
	// to this long, so that a subscription without a retry policy does not redeliver in
	// a hot loop. Defaults to 0: nack at once, and let the retry policy back off.
	NackDelay time.Duration
	// Instance identifies this worker in a run's history (who ran each attempt).
	// Defaults to the host name and the process ID, "host/pid".
	Instance string
	// RescueInterval is how often the rescuer looks for runs to republish. Defaults to 30s.
	RescueInterval time.Duration
	// Now is the clock the worker judges its own deadlines by: its hold of a lease (when
	// a claim or a renewal was sent, whether a claim's answer came too late to start the
	// job, when the lease keeper self-fences), a job's MaxRunTime, and a message's age
	// against the Retention. Defaults to time.Now; a simulation drives it with the
	// ledger's clock.
	Now func() time.Time
	// AfterFunc calls f once d has passed by Now's clock, unless the returned stop is
	// called first (stop reports whether it prevented the call); f must not run within
	// AfterFunc itself. The worker waits through it for a job's MaxRunTime and for the
	// lease keeper's renewals and self-fence; each of those checks Now again when it
	// fires, so a timer that fires early does no harm. Defaults to time.AfterFunc. A Now
	// other than the machine's clock needs an AfterFunc that fires as that clock moves
	// (a simulation's clock fires its timers as it advances), or deadlines past a jump
	// of the clock are noticed only on real time.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Logger receives the worker's logs. Defaults to slog.Default(), as the ingress's
	// does; slog.New(slog.DiscardHandler) silences them.
	Logger *slog.Logger
	// Meter records metrics. Defaults to a no-op meter.
	Meter metric.Meter
	// TracerProvider records a span per attempt, child of the message's traceparent.
	// Defaults to a no-op provider (the trace context is still carried to the job).
	TracerProvider trace.TracerProvider
}

// Defaults of Config's zero fields.
const (
	DefaultMaxRetryAfter = 24 * time.Hour
	DefaultMaxRunTime    = time.Hour
	DefaultLedgerTimeout = 10 * time.Second
	DefaultGrace         = 8 * time.Second
	DefaultConcurrency   = 8
	// DefaultNoHandlerDelay is how long a delivery of a job this worker does not run is
	// held before its nack.
	DefaultNoHandlerDelay = 10 * time.Second
	// DefaultUnhandledAfter is how long a run waits for a worker that has its job before
	// a worker without it fails it: a day, far longer than a rolling deploy.
	DefaultUnhandledAfter = 24 * time.Hour
	// SchedulerRetryWindow bounds how long a scheduler keeps retrying one run: a record
	// must outlast it, on top of the message retention and the longest lease.
	SchedulerRetryWindow = 24 * time.Hour
	// MinMaxExtension is the shortest time a pulled message's ack deadline is kept
	// extended; a worker with jobs that run longer extends it to twice the longest.
	MinMaxExtension = time.Hour
	// maxSizedRunTime bounds the job run times the ack extension and the retention
	// check are sized by: a job allowed to run longer (following an execution
	// elsewhere for days) sees its message redelivered meanwhile, and those deliveries
	// find its run held and are nacked.
	maxSizedRunTime = 24 * time.Hour
)

func (c Config) withDefaults() Config {
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 5)
	c.Retention = cmp.Or(c.Retention, ledger.DefaultRetention)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, min(DefaultMaxRetryAfter, c.Retention/2))
	c.PickupTimeout = cmp.Or(c.PickupTimeout, ledger.DefaultPickupTimeout)
	c.FinishTimeout = cmp.Or(c.FinishTimeout, 10*time.Second)
	c.LedgerTimeout = cmp.Or(c.LedgerTimeout, DefaultLedgerTimeout)
	c.MaxRunTime = cmp.Or(c.MaxRunTime, DefaultMaxRunTime)
	c.RescueInterval = cmp.Or(c.RescueInterval, 30*time.Second)
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.MessageRetention = cmp.Or(c.MessageRetention, queue.DefaultSubscriptionRetention)
	c.NoHandlerDelay = cmp.Or(c.NoHandlerDelay, DefaultNoHandlerDelay)
	c.UnhandledAfter = cmp.Or(c.UnhandledAfter, DefaultUnhandledAfter)
	if c.Instance == "" {
		host, _ := os.Hostname()
		c.Instance = fmt.Sprintf("%s/%d", cmp.Or(host, "unknown-host"), os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if c.Meter == nil {
		c.Meter = noop.NewMeterProvider().Meter("runonce/worker")
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Ledger == nil:
		return errors.New("worker: Config.Ledger is required")
	case c.Handler == nil:
		return errors.New("worker: Config.Handler is required")
	case c.Grace < 0:
		return fmt.Errorf("worker: grace %s must not be negative", c.Grace)
	case c.Concurrency < 1:
		return fmt.Errorf("worker: concurrency %d must be at least 1", c.Concurrency)
	case c.Lease < 3*time.Millisecond:
		return fmt.Errorf("worker: lease %s is too short to renew every third of it", c.Lease)
	case c.MaxAttempts < 1:
		return fmt.Errorf("worker: max attempts %d must be at least 1", c.MaxAttempts)
	case c.MaxRetryAfter < 0 || c.MaxRetryAfter > c.Retention:
		return fmt.Errorf("worker: max retry-after %s must be between 0 and the retention (%s): a longer delay outlives the record", c.MaxRetryAfter, c.Retention)
	}
	return nil
}

// Worker runs deliveries of runs. Its methods are safe for concurrent use.
type Worker struct {
	cfg     Config
	metrics *metrics
	// router is Handler's Router, nil when it is not one (it then runs every job).
	router Router
	// maxExtension is how long a pulled message's ack deadline is kept extended.
	maxExtension time.Duration
	// jobs is the context every job runs under; CancelJobs cancels it.
	jobs       context.Context
	cancelJobs context.CancelCauseFunc
	// pushSlots bounds concurrent push deliveries.
	pushSlots chan struct{}
	// mu guards stopping; inflight counts the deliveries being processed, so that Run
	// returns only once every one is released or finished.
	mu       sync.Mutex
	stopping bool
	running  bool
	inflight sync.WaitGroup
	// noHandler and held are the jobs without a handler and the runs' holding attempts
	// already logged: their deliveries come back every few seconds.
	noHandler, held logonce.Set
}

// New returns a worker. It refuses a configuration that could run a run twice or that
// cannot work: a Retention shorter than the subscription's message retention plus the
// scheduler's retry window (SchedulerRetryWindow) plus the longest lease or job (a late
// delivery would find no record and run its run again), and out-of-range bounds. With
// a Subscriber it reads the subscription's retention, within LedgerTimeout. It sizes
// the ack-deadline extension of pulled messages to the longest job (MinMaxExtension, or
// twice the longest per-job MaxRunTime of the Router, up to a day).
func New(cfg *Config) (*Worker, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: c}
	w.router, _ = c.Handler.(Router)
	longest := w.longestJob()
	w.maxExtension = max(MinMaxExtension, 2*longest)
	if !c.UnsafeRetention {
		if err := w.checkRetention(max(c.Lease, longest)); err != nil {
			return nil, err
		}
	}
	m, err := newMetrics(c.Meter)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	// Every ledger call gets its own timeout, so that a blackholed connection cannot
	// hold a delivery slot (or the rescuer) while Pub/Sub keeps extending the message's
	// ack deadline. A call's own, earlier deadline still wins: what the lease leaves,
	// for a worker claim and a renewal (the lease keeper's self-fence point). A backend
	// retries contention within the deadline it is given (a Spanner transaction Spanner
	// aborted, a Firestore write whose document changed), so a call that could not
	// finish before its lease ends does not go on past it.
	w.cfg.Ledger = c.Ledger.WithTimeout(c.LedgerTimeout)
	w.jobs, w.cancelJobs = context.WithCancelCause(context.Background())
	w.pushSlots = make(chan struct{}, c.Concurrency)
	if c.Grace >= 10*time.Second {
		c.Logger.Warn("worker: the grace is 10s or more: Cloud Run kills an instance 10s after SIGTERM, so jobs may be killed before they are released",
			slog.Duration("grace", c.Grace))
	}
	return w, nil
}

// longestJob is the longest per-job run time of the router, up to maxSizedRunTime.
func (w *Worker) longestJob() time.Duration {
	var longest time.Duration
	if w.router == nil {
		return 0
	}
	for _, name := range w.router.Jobs() {
		if p, ok := w.router.JobPolicy(name); ok && p.MaxRunTime <= maxSizedRunTime {
			longest = max(longest, p.MaxRunTime)
		}
	}
	return longest
}

// checkRetention refuses a retention that a message could outlive.
func (w *Worker) checkRetention(longestLease time.Duration) error {
	msgRetention, source := w.cfg.MessageRetention, "the push subscription's message retention (Config.MessageRetention)"
	if w.cfg.Subscriber != nil {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LedgerTimeout)
		defer cancel()
		d, err := w.cfg.Subscriber.Retention(ctx)
		if err != nil {
			return fmt.Errorf("worker: read the subscription's message retention: %w", err)
		}
		msgRetention, source = d, "the subscription's message retention"
	}
	if floor := msgRetention + SchedulerRetryWindow + longestLease; w.cfg.Retention < floor {
		return fmt.Errorf("%w: retention %s is too short: records must outlast %s (%s), "+
			"the scheduler's retry window (%s) and the longest lease or job (%s), or a late delivery could run a run twice; use at least %s",
			ErrRetentionTooShort, w.cfg.Retention, source, msgRetention, SchedulerRetryWindow, longestLease, floor)
	}
	return nil
}

// ErrRetentionTooShort is New's error for a retention a message could outlive.
var ErrRetentionTooShort = errors.New("worker: retention too short")

// ErrShutdown is the cause of a job's context cancelled because the worker shut down.
var ErrShutdown = errors.New("worker: shutting down")

// ErrMaxRunTime is the cause of a job's context cancelled because the job ran longer
// than its maximum run time; the run is released for a retry.
var ErrMaxRunTime = errors.New("worker: the job ran past its maximum run time; cancelled")

// ErrSelfFenced is the cause of a job's context cancelled because the worker could not
// renew its lease before it would run out.
var ErrSelfFenced = errors.New("worker: could not renew the lease before it ran out; stopped the job")

// CancelJobs cancels every running job with ErrShutdown: their runs are released and
// their deliveries nacked. Call it when the shutdown grace is over.
func (w *Worker) CancelJobs() { w.cancelJobs(ErrShutdown) }

// Verdict says what to do with a delivery.
type Verdict struct {
	// Ack is true when the message must not come back: the run is done, failed for good,
	// or can never be run (malformed, too old).
	Ack bool
	// RetryAt, when set with a nack, is the earliest time the run can make progress.
	RetryAt time.Time
	// Outcome names what happened, for logs and metrics.
	Outcome string
}

// Outcomes of a delivery.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeReleased  = "released"
	OutcomeHeld      = "held"
	OutcomeTerminal  = "duplicate_terminal"
	OutcomeLeaseLost = "lease_lost"
	// OutcomeCancelled: an operator cancelled the run while it ran; the job's context
	// was cancelled with ledger.ErrCancelled in its cause, nothing it wrote afterwards
	// landed, and the delivery is acked (the run is finished).
	OutcomeCancelled = "cancelled"
	OutcomeDropped   = "dropped_too_old"
	// OutcomePayloadMismatch: the message's data does not hash to the run's stored
	// payload hash (a forged or stale message); it is acked and never run.
	OutcomePayloadMismatch = "payload_mismatch"
	OutcomeError           = "ledger_error"
	// OutcomeNoHandler: Handler does not run the delivery's job; the delivery is nacked
	// after Config.NoHandlerDelay, nothing is written and no attempt counted.
	OutcomeNoHandler = "no_handler"
	// OutcomeUnhandled: Handler does not run the delivery's job, and the run waited
	// longer than Config.UnhandledAfter for a worker that does: it was claimed and
	// failed for good, and the delivery acked.
	OutcomeUnhandled = "unhandled"
	// OutcomeStopping: the worker is shutting down and took no new delivery (nacked).
	OutcomeStopping = "stopping"
)

// Process runs one delivery through claim → job → complete/release/fail and returns
// whether to ack; it neither acks nor nacks d (Run and the push endpoint do). It blocks
// while the job runs. The job runs under the worker's own context, not ctx: a
// delivery's context ends when its receiver stops, while a job gets the shutdown grace
// (see CancelJobs). A delivery that is not a runonce message (d.Err) is acked: it can
// never be run. A delivery of a job Handler does not run is not an attempt: nothing is
// written, and it is nacked after Config.NoHandlerDelay; once its run has waited
// Config.UnhandledAfter for a worker that runs the job, it is claimed and failed.
func (w *Worker) Process(ctx context.Context, d *queue.Delivery) (v Verdict) {
	if d.Err != nil {
		w.cfg.Logger.ErrorContext(ctx, "message is not a runonce run; acked and dropped", slog.String("message_id", d.ID), slog.Any("error", d.Err))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeDropped})
	}
	if !w.enter() {
		return w.verdict(ctx, Verdict{Outcome: OutcomeStopping})
	}
	defer w.inflight.Done()
	ctx, end := w.traceAttempt(ctx, d)
	defer func() { end(v) }()
	m := d.Message
	log := w.cfg.Logger.With(slog.String("run_id", m.Identity.RunID), slog.String("job", m.Identity.Job))
	// unhandled is the run as read when Handler does not run its job and it waited for
	// a worker that does longer than UnhandledAfter: it is claimed to be failed.
	var unhandled *ledger.Run
	if _, ok := w.policy(m.Identity.Job); !ok {
		var v Verdict
		if unhandled, v = w.unhandled(ctx, d, log); unhandled == nil {
			return v
		}
	}
	attemptID, err := uuid.NewV7()
	if err != nil {
		return w.verdict(ctx, Verdict{Outcome: OutcomeError})
	}
	// The claim is checked against what the message carries, not what it says: the
	// hash of its data must be the run's stored payload hash.
	id := m.Identity
	id.PayloadHash = ledger.PayloadHash(m.Identity.Payload)
	// A message older than the retention may have outlived its run's record (a record
	// lives at least a retention after the run's creation, the message's EnqueuedAt):
	// it may run a run that exists, but must not create one, which could run a finished
	// run twice.
	age := w.age(d)
	mustExist := age > w.cfg.Retention
	claimStart := w.cfg.Now()
	// A claim answered past the lease keeper's self-fence point cannot start the job
	// (see run): its retries end there, not at the LedgerTimeout.
	actx, cancel := context.WithTimeout(ctx, w.fenceAfter())
	res, err := w.cfg.Ledger.Acquire(actx, &ledger.AcquireParams{
		Identity: id, AttemptID: attemptID.String(), Lease: w.cfg.Lease, Retention: w.cfg.Retention, MustExist: mustExist,
		Worker: w.cfg.Instance,
	})
	cancel()
	if err != nil {
		if mustExist && errors.Is(err, ledger.ErrNotFound) {
			log.ErrorContext(ctx, "message older than the retention whose run has no record dropped: the run may have finished and been deleted, running it could run it twice",
				slog.Duration("age", age), slog.Duration("retention", w.cfg.Retention))
			return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeDropped})
		}
		if errors.Is(err, ledger.ErrInvalid) {
			log.ErrorContext(ctx, "delivery refused by the ledger and dropped", slog.Any("error", err))
			return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeDropped})
		}
		log.WarnContext(ctx, "worker claim failed; the message will come back", slog.Any("error", err))
		return w.verdict(ctx, Verdict{Outcome: OutcomeError})
	}
	switch res.Outcome {
	case ledger.OutcomePayloadMismatch:
		log.ErrorContext(ctx, "delivery carries another payload than the run was accepted with: never run, acked; the run is untouched",
			slog.String("message_payload_sha256", id.PayloadHash), slog.String("run_payload_sha256", res.Run.PayloadHash),
			slog.String("status", string(res.Run.Status)))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomePayloadMismatch})
	case ledger.OutcomeFinished:
		log.InfoContext(ctx, "duplicate delivery of a finished run acked", slog.String("status", string(res.Run.Status)))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeTerminal})
	case ledger.OutcomeHeld:
		w.metrics.nackedHeld.Add(ctx, 1)
		// A held run's deliveries come back until its holder finishes: logged once per
		// run and holding attempt, then at debug level.
		level := slog.LevelDebug
		if w.held.First(res.Run.ID + "/" + strconv.FormatInt(res.Run.Attempt, 10)) {
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "run held by another attempt; delivery nacked (logged once per run and attempt)", slog.Time("held_until", res.Until), slog.Int64("holder_attempt", res.Run.Attempt))
		w.nackDelay(ctx, res.Until)
		return w.verdict(ctx, Verdict{RetryAt: res.Until, Outcome: OutcomeHeld})
	}
	if unhandled != nil {
		return w.failUnhandled(ctx, unhandled, res.Run, log)
	}
	return w.run(ctx, d, res.Run, claimStart, log)
}

// unhandled decides a delivery of a job Handler does not run. While the run has waited
// less than UnhandledAfter for a worker that runs its job (judged from the message,
// without a ledger read, while the run itself is younger than that), the delivery is
// held NoHandlerDelay and nacked, nothing written: a worker that runs the job (a newer
// one, in a rolling deploy) takes it. Past it, the run as read is returned, to be
// claimed and failed. A delivery of a finished run is acked.
func (w *Worker) unhandled(ctx context.Context, d *queue.Delivery, log *slog.Logger) (*ledger.Run, Verdict) {
	bound, now := w.cfg.UnhandledAfter, w.cfg.Now()
	young := bound < 0 || !d.Message.EnqueuedAt.IsZero() && now.Sub(d.Message.EnqueuedAt) < bound
	if !young {
		run, err := w.cfg.Ledger.Get(ctx, &ledger.GetParams{RunID: d.Message.Identity.RunID})
		switch {
		case err != nil:
			log.WarnContext(ctx, "no handler for this job in this worker, and its run could not be read to see how long it has waited; delivery nacked", slog.Any("error", err))
		case run.Status.Terminal():
			log.InfoContext(ctx, "duplicate delivery of a finished run acked", slog.String("status", string(run.Status)))
			return nil, w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeTerminal})
		case now.Sub(waitingSince(run)) >= bound:
			return run, Verdict{}
		}
	}
	// Its deliveries come back every NoHandlerDelay for as long as no worker runs the
	// job: warned once per job, then at debug level.
	level := slog.LevelDebug
	if w.noHandler.First(d.Message.Identity.Job) {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "no handler for this job in this worker: its deliveries are nacked, no attempt counted, until a worker that runs the job (or this one, once it does) takes them, "+
		"or a worker without it fails the run once it has waited unhandled_after; logged once per job, later deliveries at debug level",
		slog.Duration("nack_after", w.cfg.NoHandlerDelay), slog.Duration("unhandled_after", bound))
	w.hold(ctx, w.cfg.NoHandlerDelay)
	return nil, w.verdict(ctx, Verdict{RetryAt: w.cfg.Now().Add(w.cfg.NoHandlerDelay), Outcome: OutcomeNoHandler})
}

// waitingSince is when r began to wait for the worker that is to claim it next: the
// latest of its creation, the time it became due (NotBefore), the end of a running
// run's lease and its history's latest event other than a rescue (a claim, an attempt's
// end, an operator's action). A rescue only republishes the run: it does not count as
// a worker taking it. A history whose kept events are all rescues (a run nobody
// claimed for MaxHistory pickup timeouts) counts from the run's creation.
func waitingSince(r *ledger.Run) time.Time {
	since := r.CreatedAt
	if r.NotBefore.After(since) {
		since = r.NotBefore
	}
	if r.Status == ledger.StatusRunning && r.Deadline.After(since) {
		since = r.Deadline
	}
	for i := len(r.History) - 1; i >= 0; i-- {
		if e := r.History[i]; e.Kind != ledger.EventRescued {
			if e.At.After(since) {
				since = e.At
			}
			break
		}
	}
	return since
}

// failUnhandled fails a run this worker claimed only because no worker ran its job for
// UnhandledAfter (read is the run as read before the claim, got as claimed). If another
// attempt claimed the run between the read and the claim, a worker may run its job
// after all: the run is released instead.
func (w *Worker) failUnhandled(ctx context.Context, read, got *ledger.Run, log *slog.Logger) Verdict {
	fence := ledger.Fence{RunID: got.ID, Attempt: got.Attempt, AttemptID: got.AttemptID}
	log = log.With(slog.Int64("attempt", got.Attempt), slog.String("attempt_id", got.AttemptID))
	if got.Attempt != read.Attempt+1 {
		return w.release(ctx, fence, fmt.Sprintf("claimed by %s, which has no handler for job %q, to fail it as unhandled, but attempt %d claimed it since it was read: released for a worker that runs the job",
			w.cfg.Instance, got.Job, got.Attempt-1), 0, log)
	}
	since := waitingSince(read)
	return w.failAs(ctx, fence, fmt.Sprintf("no worker has a handler for job %q: the run waited %s for one (since %s), longer than the unhandled bound of %s (-unhandled-after); %s, which received it, does not run the job either",
		got.Job, w.cfg.Now().Sub(since).Round(time.Second), since.UTC().Format(time.RFC3339), w.cfg.UnhandledAfter, w.cfg.Instance), OutcomeUnhandled, log)
}

// age is how old a delivery's message is by Config.Now, the clock the worker times
// everything of its own by (a simulation's clock, not the machine's).
func (w *Worker) age(d *queue.Delivery) time.Duration {
	now := w.cfg.Now()
	var age time.Duration
	for _, t := range []time.Time{d.PublishTime, d.Message.EnqueuedAt} {
		if !t.IsZero() {
			age = max(age, now.Sub(t))
		}
	}
	return age
}

// policy returns job's bounds, the Config's where it sets none of its own, and whether
// Handler runs it.
func (w *Worker) policy(job string) (Policy, bool) {
	var p Policy
	ok := true
	if w.router != nil {
		p, ok = w.router.JobPolicy(job)
	}
	p.MaxAttempts = cmp.Or(p.MaxAttempts, w.cfg.MaxAttempts)
	p.MaxRunTime = cmp.Or(p.MaxRunTime, w.cfg.MaxRunTime)
	return p, ok
}

// run works on a run this worker acquired.
func (w *Worker) run(dctx context.Context, d *queue.Delivery, run *ledger.Run, claimStart time.Time, log *slog.Logger) Verdict {
	job := &Job{
		RunID: run.ID, Namespace: run.Namespace, Name: run.Job, Key: run.Key, ScheduleTime: run.ScheduleTime,
		Attempt: run.Attempt, AttemptID: run.AttemptID, DeliveryAttempt: d.DeliveryAttempt, Payload: d.Message.Identity.Payload,
	}

	log = log.With(slog.Int64("attempt", run.Attempt), slog.String("attempt_id", run.AttemptID))
	traceRun(dctx, run)
	fence := ledger.Fence{RunID: run.ID, Attempt: run.Attempt, AttemptID: run.AttemptID}
	// A claim answered after the point where the lease keeper would self-fence may
	// have granted a lease that has already run out, and another attempt may hold the
	// run: starting the job would run two at once. Nothing is written; the run comes
	// back after its lease (a takeover or the rescuer).
	if late := w.cfg.Now().Sub(claimStart); late >= w.fenceAfter() {
		log.WarnContext(dctx, "worker claim answered too late to start the job: its lease may have run out; delivery nacked, the run comes back after its lease",
			slog.Duration("claim_took", late), slog.Duration("lease", w.cfg.Lease))
		return w.verdict(dctx, Verdict{Outcome: OutcomeLeaseLost})
	}
	policy, _ := w.policy(run.Job)
	limit := policy.MaxAttempts
	// The attempt's rank in the run's budget: an operator's retry starts a fresh budget
	// (ledger.Run.AttemptsMade is reset), while run.Attempt, the fencing token, goes on.
	rank := run.AttemptsMade + 1
	if rank > int64(limit) {
		return w.fail(dctx, fence, fmt.Sprintf("attempts exhausted: attempt %d of at most %d (the earlier ones died without an outcome); last error: %s", rank, limit, run.LastError), log)
	}

	// The job's context: values (trace) from the delivery, cancellation from the worker's
	// shutdown and from the lease keeper.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(dctx))
	defer cancel(nil)
	stopOnShutdown := context.AfterFunc(w.jobs, func() { cancel(context.Cause(w.jobs)) })
	defer stopOnShutdown()
	maxRun := policy.MaxRunTime
	stopOverrun := w.at(w.cfg.Now().Add(maxRun), func() { cancel(fmt.Errorf("%w (%s)", ErrMaxRunTime, maxRun)) })
	defer stopOverrun()
	a := &attempt{w: w, job: job, fence: fence, cancel: cancel, log: log}
	ctx = withAttempt(ctx, a)

	k := w.keepLease(ctx, a, claimStart)

	start := time.Now()
	log.InfoContext(ctx, "job started")
	herr := w.call(ctx, job)
	k.stop()
	w.metrics.jobDuration.Record(ctx, time.Since(start).Seconds(), w.metrics.job(job.Name))

	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ledger.ErrCancelled):
		log.WarnContext(ctx, "run cancelled by an operator during the job: job stopped, nothing more written, delivery acked", slog.Any("cause", cause), slog.Any("error", herr))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeCancelled})
	case errors.Is(cause, ledger.ErrLeaseLost):
		w.metrics.leasesLost.Add(ctx, 1)
		log.WarnContext(ctx, "lease lost during the job: another attempt holds the run; nothing written, delivery nacked", slog.Any("cause", cause), slog.Any("error", herr))
		return w.verdict(ctx, Verdict{Outcome: OutcomeLeaseLost})
	case herr == nil:
		return w.complete(ctx, fence, a.storedResult(), log)
	case errors.Is(herr, ErrPermanent):
		return w.fail(ctx, fence, herr.Error(), log)
	}
	// A retryable error, a panic, a shutdown or a self-fence: release for a retry, unless
	// the attempts are exhausted.
	if rank >= int64(limit) && cause == nil {
		return w.fail(ctx, fence, fmt.Sprintf("attempts exhausted: attempt %d of at most %d failed: %v", rank, limit, herr), log)
	}
	var ra *RetryAfterError
	var delay time.Duration
	if errors.As(herr, &ra) {
		delay = max(ra.Delay, 0)
		if delay > w.cfg.MaxRetryAfter {
			log.WarnContext(ctx, "the job asked for a retry later than the worker's max retry-after; cut to it",
				slog.Duration("asked", delay), slog.Duration("max_retry_after", w.cfg.MaxRetryAfter))
			delay = w.cfg.MaxRetryAfter
		}
	}
	// The reason names the cause of a cancelled job (a shutdown, a self-fence, the
	// maximum run time) and the job's error, once: a job that returned the cause
	// itself (context.Cause) already says it.
	reason := herr.Error()
	if cause != nil && !errors.Is(herr, cause) {
		reason = fmt.Sprintf("%v (job error: %v)", cause, herr)
	}
	return w.release(ctx, fence, reason, delay, log)
}

// call runs the handler, turning a panic into a retryable error.
func (w *Worker) call(ctx context.Context, j *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return w.cfg.Handler.HandleJob(ctx, j)
}

// at calls f once Config.Now reaches t, waiting through Config.AfterFunc: a timer that
// fires before t by Now (a clock behind the machine's, or a timer that fires early) is
// armed again for what is left. f runs on the timer's call, never within at, so a
// caller may hold a lock f takes. The returned stop prevents the call.
func (w *Worker) at(t time.Time, f func()) (stop func()) {
	c := &timedCall{w: w, t: t, f: f}
	c.mu.Lock()
	c.cur = w.cfg.AfterFunc(max(t.Sub(w.cfg.Now()), 0), c.fire)
	c.mu.Unlock()
	return c.stop
}

// timedCall is one call of at, in one allocation rather than one per variable its
// closures would share (at runs three times a job).
type timedCall struct {
	w *Worker
	t time.Time
	f func()

	mu      sync.Mutex
	stopped bool
	cur     func() bool // stops the timer armed last
}

func (c *timedCall) fire() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	if left := c.t.Sub(c.w.cfg.Now()); left > 0 {
		c.cur = c.w.cfg.AfterFunc(left, c.fire)
		c.mu.Unlock()
		return
	}
	c.stopped = true
	c.mu.Unlock()
	c.f()
}

func (c *timedCall) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	c.cur()
}

// keeper renews an attempt's lease every third of it, by Config.Now, until stopped. A
// renewal that finds the lease lost cancels the job with ledger.ErrLeaseLost; a renewal
// that fails otherwise is tried again a thirtieth of the lease later, doubling with each
// failure in a row (renewRetry); renewals that keep failing cancel it with ErrSelfFenced
// before the lease can run out. Each renewal may take until that self-fence point.
type keeper struct {
	w   *Worker
	ctx context.Context
	a   *attempt
	// renewing counts the renewal in flight, which stop waits for.
	renewing sync.WaitGroup
	mu       sync.Mutex
	stopped  bool
	// held is when the latest successful claim or renewal was sent, by Config.Now: the
	// lease runs out no sooner than held+Lease by the ledger's clock.
	held    time.Time
	lastErr error
	// failed counts the renewals failed in a row.
	failed int
	// stopTick and stopFence stop the next renewal and the self-fence.
	stopTick, stopFence func()
}

// keepLease starts the keeper of a's lease, held since held (when the claim was sent).
func (w *Worker) keepLease(ctx context.Context, a *attempt, held time.Time) *keeper {
	k := &keeper{w: w, ctx: ctx, a: a, held: held}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopFence = w.at(k.fenceAt(), k.selfFence)
	k.stopTick = w.at(w.cfg.Now().Add(w.cfg.Lease/3), k.renew)
	return k
}

// fenceAfter is how long after a claim or a renewal was sent the lease keeper stops the
// job unless a renewal lands (fenceAt): a sixth of the lease before the lease can run
// out. A claim answered later cannot start the job, nor a renewal keep it going.
func (w *Worker) fenceAfter() time.Duration { return w.cfg.Lease - w.cfg.Lease/6 }

// fenceAt is a sixth of a lease before the lease can run out: the job is stopped then
// unless a renewal succeeds. k.mu must be held.
func (k *keeper) fenceAt() time.Time { return k.held.Add(k.w.fenceAfter()) }

// done reports whether the keeper has nothing more to do: stopped, or the job's
// context ended (the job is winding down; its run is finished or released after it).
// k.mu must be held.
func (k *keeper) done() bool { return k.stopped || k.ctx.Err() != nil }

// stop ends the keeper and waits for a renewal in flight.
func (k *keeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.stopTick()
	k.stopFence()
	k.mu.Unlock()
	k.renewing.Wait()
}

func (k *keeper) selfFence() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done() {
		return
	}
	if k.w.cfg.Now().Before(k.fenceAt()) { // a renewal succeeded meanwhile
		k.stopFence = k.w.at(k.fenceAt(), k.selfFence)
		return
	}
	k.stopped = true
	k.stopTick()
	k.a.log.ErrorContext(k.ctx, "lease renewals failed until the lease would run out; job cancelled (self-fenced)", slog.Any("error", k.lastErr))
	k.a.cancel(fmt.Errorf("%w: %w", ErrSelfFenced, cmp.Or(k.lastErr, errors.New("no renewal was answered"))))
}

func (k *keeper) renew() {
	w := k.w
	k.mu.Lock()
	if k.done() {
		k.mu.Unlock()
		return
	}
	k.renewing.Add(1)
	defer k.renewing.Done()
	fenceAt := k.fenceAt()
	k.mu.Unlock()

	callStart := w.cfg.Now()
	// The renewal is bounded by the self-fence point, by Now; the self-fence also
	// cancels the job's context, and with it the call.
	rctx, cancel := context.WithTimeout(k.ctx, fenceAt.Sub(callStart))
	_, err := w.cfg.Ledger.Renew(rctx, &ledger.RenewParams{Fence: k.a.fence, Lease: w.cfg.Lease, Retention: w.cfg.Retention, Progress: k.a.progress()})
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done() {
		return
	}
	next := w.cfg.Lease / 3
	switch {
	case err == nil:
		k.held = callStart
		k.failed = 0
		k.stopFence()
		k.stopFence = w.at(k.fenceAt(), k.selfFence)
		w.metrics.renewals.Add(k.ctx, 1)
	case errors.Is(err, ledger.ErrLeaseLost):
		w.metrics.fencedRefused.Add(k.ctx, 1)
		k.stopped = true
		k.stopFence()
		k.a.cancel(err)
		return
	default:
		// A renewal that failed (the ledger contended or out of reach) is tried again
		// soon, not a third of the lease later: two such failures would otherwise use up
		// the lease and fence a holder whose renewals were merely contended.
		k.lastErr = err
		next = min(next, renewRetry(w.cfg.Lease, k.failed))
		k.failed++
		k.a.log.WarnContext(k.ctx, "lease renewal failed; retrying before the lease runs out", slog.Any("error", err),
			slog.Duration("retry_in", next), slog.Time("self_fence_at", k.fenceAt()))
	}
	k.stopTick = w.at(w.cfg.Now().Add(next), k.renew)
}

// renewRetry is how long the lease keeper waits before it tries a renewal again after
// failed renewals in a row: a thirtieth of the lease, doubling with each (the caller
// caps it at a third, the pace of renewals that succeed).
func renewRetry(lease time.Duration, failed int) time.Duration {
	return lease / 30 << min(failed, 4)
}

// finish retries a finishing write while the backend is unavailable, within
// FinishTimeout; a refused write (lease lost) is not retried.
func (w *Worker) finish(ctx context.Context, write func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FinishTimeout)
	defer cancel()
	b := retry.WithJitterPercent(20, retry.WithCappedDuration(time.Second, retry.NewExponential(50*time.Millisecond)))
	return retry.Do(ctx, b, func(ctx context.Context) error {
		err := write(ctx)
		if ledger.Retryable(err) {
			return retry.RetryableError(err)
		}
		return err
	})
}

func (w *Worker) complete(ctx context.Context, f ledger.Fence, result []byte, log *slog.Logger) Verdict {
	err := w.finish(ctx, func(ctx context.Context) error {
		_, err := w.cfg.Ledger.Complete(ctx, &ledger.CompleteParams{Fence: f, Result: result, Progress: progressOf(ctx), Retention: w.cfg.Retention})
		if result != nil && (errors.Is(err, ledger.ErrTooLarge) || errors.Is(err, ledger.ErrInvalid)) {
			// The record cannot hold the result (Firestore: the payload and the result
			// share a document's 1 MiB): the job's work is done, so the run completes
			// without it rather than running again.
			log.WarnContext(ctx, "the ledger refused the run's result; the run completes without one", slog.Int("result_bytes", len(result)), slog.Any("error", err))
			result = nil
			_, err = w.cfg.Ledger.Complete(ctx, &ledger.CompleteParams{Fence: f, Progress: progressOf(ctx), Retention: w.cfg.Retention})
		}
		return err
	})
	return w.finished(ctx, err, Verdict{Ack: true, Outcome: OutcomeCompleted}, "run completed", log)
}

func (w *Worker) fail(ctx context.Context, f ledger.Fence, reason string, log *slog.Logger) Verdict {
	return w.failAs(ctx, f, reason, OutcomeFailed, log)
}

// failAs fails the run for good, counted as outcome.
func (w *Worker) failAs(ctx context.Context, f ledger.Fence, reason, outcome string, log *slog.Logger) Verdict {
	err := w.finish(ctx, func(ctx context.Context) error {
		_, err := w.cfg.Ledger.Fail(ctx, &ledger.FailParams{Fence: f, Error: reason, Progress: progressOf(ctx), Retention: w.cfg.Retention})
		return err
	})
	return w.finished(ctx, err, Verdict{Ack: true, Outcome: outcome}, "run failed for good: "+reason, log)
}

func (w *Worker) release(ctx context.Context, f ledger.Fence, reason string, delay time.Duration, log *slog.Logger) Verdict {
	var released *ledger.Run
	err := w.finish(ctx, func(ctx context.Context) error {
		r, err := w.cfg.Ledger.Release(ctx, &ledger.ReleaseParams{
			Fence: f, Error: reason, RetryAfter: delay, PickupTimeout: w.cfg.PickupTimeout, Retention: w.cfg.Retention,
			Progress: progressOf(ctx),
		})
		released = r
		return err
	})
	v := Verdict{Outcome: OutcomeReleased}
	if err == nil {
		v.RetryAt = released.NotBefore
		log = log.With(slog.Time("rescue_after", released.Deadline))
		if !released.NotBefore.IsZero() {
			log = log.With(slog.Time("retry_not_before", released.NotBefore))
		}
		w.nackDelay(ctx, released.NotBefore)
	}
	return w.finished(ctx, err, v, "run released for a retry: "+reason, log)
}

// finished logs the end of an attempt and turns a refused or failed finishing write into
// a nack: the run stays with whoever holds it, or comes back when its lease runs out.
func (w *Worker) finished(ctx context.Context, err error, v Verdict, msg string, log *slog.Logger) Verdict {
	switch {
	case err == nil:
		log.InfoContext(ctx, msg, slog.String("outcome", v.Outcome))
		return w.verdict(ctx, v)
	case errors.Is(err, ledger.ErrCancelled):
		w.metrics.fencedRefused.Add(ctx, 1)
		log.WarnContext(ctx, "finishing write refused: an operator cancelled the run; delivery acked", slog.String("wanted", v.Outcome), slog.Any("error", err))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeCancelled})
	case errors.Is(err, ledger.ErrLeaseLost):
		w.metrics.fencedRefused.Add(ctx, 1)
		w.metrics.leasesLost.Add(ctx, 1)
		log.WarnContext(ctx, "finishing write refused: another attempt took the run over; delivery nacked", slog.String("wanted", v.Outcome), slog.Any("error", err))
		return w.verdict(ctx, Verdict{Outcome: OutcomeLeaseLost})
	default:
		log.ErrorContext(ctx, "finishing write failed: the run stays running until its lease expires, then another attempt takes it; delivery nacked",
			slog.String("wanted", v.Outcome), slog.Any("error", err))
		return w.verdict(ctx, Verdict{Outcome: OutcomeError})
	}
}

func (w *Worker) verdict(ctx context.Context, v Verdict) Verdict {
	w.metrics.deliveries.Add(ctx, 1, w.metrics.outcome(v.Outcome))
	return v
}

func (w *Worker) nackDelay(ctx context.Context, until time.Time) {
	if w.cfg.NackDelay <= 0 {
		return
	}
	d := w.cfg.NackDelay
	if !until.IsZero() {
		d = min(d, time.Until(until))
	}
	w.hold(ctx, d)
}

// hold waits d, or until ctx ends or the worker cancels its jobs.
func (w *Worker) hold(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	case <-w.jobs.Done():
	}
}
