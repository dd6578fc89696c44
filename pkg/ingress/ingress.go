package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/internal/jsonhttp"
	"github.com/runonce/runonce/pkg/internal/logonce"
	"github.com/runonce/runonce/pkg/internal/sameorigin"
	"github.com/runonce/runonce/pkg/internal/tracehttp"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/ticks"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxBody        = 1 << 20
	DefaultMaxSkew        = time.Minute
	DefaultLedgerTimeout  = 5 * time.Second
	DefaultPublishTimeout = queue.DefaultPublishTimeout
	DefaultRetryAfter     = 5 * time.Second
)

// Config configures the ingress. Ledger and Publisher are required.
type Config struct {
	Ledger    *ledger.Ledger
	Publisher queue.RunPublisher
	// Namespace is mixed into every run ID (e.g. "my-project/us-central1").
	Namespace string
	// NamespaceHeader, when set, names a request header whose value, when present,
	// replaces Namespace for that request (a job configured to send it). Only set it when
	// every caller is authenticated.
	NamespaceHeader string
	// MaxBody is the largest accepted payload in bytes. Default DefaultMaxBody.
	MaxBody int64
	// MaxSkew is how far after now a schedule time may be before the request is refused
	// as a forced run. Default DefaultMaxSkew.
	MaxSkew time.Duration
	// Jobs are the only job names accepted; others get 404, whose error lists them (the
	// first MaxListedJobs). Nil is refused unless AcceptAnyJob is set: a 2xx for a job
	// no worker runs (a typo) would promise a run nobody claims.
	Jobs []string
	// AcceptAnyJob accepts a run of any valid job name, with Jobs nil. A run of a job no
	// worker has a handler for then waits until a worker fails it
	// (worker.Config.UnhandledAfter).
	AcceptAnyJob bool
	// PickupTimeout is a new run's pickup deadline. Zero: the ledger's default.
	PickupTimeout time.Duration
	// Retention is how long run records are kept. Zero: the ledger's default.
	Retention time.Duration
	// Auth authenticates POST /v1/jobs and the read endpoints GET /v1/runs and GET
	// /v1/runs/{run_id}. Required: auth.None{} turns authentication off explicitly.
	Auth auth.Authenticator
	// Operators authenticates the operators: they may also read, retry, cancel and
	// release runs (POST /v1/runs/{run_id}:retry, …) and see a run's payload
	// (?view=full). Nil: nobody may (403).
	Operators auth.Authenticator
	// LedgerTimeout and PublishTimeout bound one ledger call and one publish.
	LedgerTimeout  time.Duration
	PublishTimeout time.Duration
	// RepublishAfter: a duplicate of a queued run last written longer ago than this is
	// republished (its message may be lost); a younger one is presumed still being
	// published by the request that claimed it. Default LedgerTimeout+PublishTimeout,
	// the longest a claiming request takes to publish or expedite its claim.
	RepublishAfter time.Duration
	// RetryAfter is sent with 503. Default DefaultRetryAfter.
	RetryAfter time.Duration
	// TraceProject is the Google Cloud project of the request traces, for the logs'
	// trace field. Empty: no trace field.
	TraceProject string
	// TracerProvider records a server span per request (the caller's trace context,
	// traceparent or X-Cloud-Trace-Context, is its parent). Defaults to a no-op provider
	// (the trace context is still carried to the logs and the published message).
	TracerProvider trace.TracerProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Meter defaults to a no-op meter.
	Meter metric.Meter
	// Metrics serves GET /metrics; nil: 404.
	Metrics http.Handler
	// Schedules are the jobs' schedules (the jobs file's schedule and scheduler_job),
	// which the tick audit (GET /v1/jobs/{job}/ticks) and backfill (POST
	// /v1/jobs/{job}:backfill) read. Nil: no job has one (both answer 404).
	Schedules *ticks.Book
	// BackfillRate bounds the runs backfill claims, per second, over every backfill
	// request of this handler. Default DefaultBackfillRate.
	BackfillRate float64
	// Now replaces the clock for skew checks and the tick audit, for tests. Default
	// time.Now.
	Now func() time.Time
}

// Handler is the ingress: an http.Handler for POST /v1/jobs/{job}, GET
// /v1/runs/{run_id}, /healthz, /readyz and /metrics.
type Handler struct {
	cfg     Config
	jobs    map[string]bool
	known   string // the accepted jobs, listed for a 404
	log     *slog.Logger
	mux     *routeMux
	ui      *ui
	handler http.Handler
	m       instruments
	// ignoredKeys are the jobs whose requests were found to carry an Idempotency-Key
	// besides the scheduler's headers, logged once each.
	ignoredKeys logonce.Set
	// backfillRate paces backfill's claims.
	backfillRate *rate.Limiter
}

// New returns the ingress handler for config, which it copies: Ledger, Publisher and
// Auth are required, and each zero field takes the default its comment documents,
// applied here. Like worker.New, it takes a pointer.
func New(config *Config) (*Handler, error) {
	if config == nil {
		return nil, errors.New("ingress: nil Config: Ledger, Publisher and Auth are required")
	}
	cfg := *config
	if cfg.Ledger == nil {
		return nil, errors.New("ingress: Config.Ledger is required")
	}
	if cfg.Publisher == nil {
		return nil, errors.New("ingress: Config.Publisher is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("ingress: Config.Auth is required (auth.None{} turns authentication off explicitly)")
	}
	if err := validNamespace(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	switch {
	case cfg.Jobs == nil && !cfg.AcceptAnyJob:
		return nil, errors.New("ingress: Config.Jobs is nil: list the jobs this ingress accepts (a 2xx for a job no worker runs, a typo, " +
			"promises a run nobody claims), or set Config.AcceptAnyJob")
	case cfg.Jobs != nil && cfg.AcceptAnyJob:
		return nil, errors.New("ingress: Config.Jobs and Config.AcceptAnyJob are both set: give one")
	}
	if cfg.MaxBody < 0 || cfg.MaxSkew < 0 || cfg.BackfillRate < 0 {
		return nil, errors.New("ingress: MaxBody, MaxSkew and BackfillRate must not be negative")
	}
	cfg.MaxBody = cmp.Or(cfg.MaxBody, DefaultMaxBody)
	cfg.MaxSkew = cmp.Or(cfg.MaxSkew, DefaultMaxSkew)
	cfg.LedgerTimeout = cmp.Or(cfg.LedgerTimeout, DefaultLedgerTimeout)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, DefaultPublishTimeout)
	cfg.RepublishAfter = cmp.Or(cfg.RepublishAfter, cfg.LedgerTimeout+cfg.PublishTimeout)
	cfg.RetryAfter = cmp.Or(cfg.RetryAfter, DefaultRetryAfter)
	cfg.BackfillRate = cmp.Or(cfg.BackfillRate, DefaultBackfillRate)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Meter == nil {
		cfg.Meter = noop.NewMeterProvider().Meter("")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, log: cfg.Logger.With(slog.String("component", "ingress")),
		backfillRate: rate.NewLimiter(rate.Limit(cfg.BackfillRate), max(1, int(cfg.BackfillRate)))}
	if cfg.Jobs != nil {
		h.jobs = make(map[string]bool, len(cfg.Jobs))
		for _, j := range cfg.Jobs {
			if err := jobs.ValidName(j); err != nil {
				return nil, fmt.Errorf("ingress: Config.Jobs: %w", err)
			}
			h.jobs[j] = true
		}
		h.known = knownJobs(cfg.Jobs)
	}
	m, err := newInstruments(cfg.Meter)
	if err != nil {
		return nil, err
	}
	h.m = m
	mux := &routeMux{ServeMux: http.NewServeMux()}
	mux.HandleFunc("POST /v1/jobs/{job}", h.postJob)
	mux.HandleFunc("/v1/jobs/{job}", methodNotAllowed(http.MethodPost))
	mux.HandleFunc("GET /v1/jobs/{job}/ticks", h.getTicks)
	mux.HandleFunc("/v1/jobs/{job}/ticks", methodNotAllowed(http.MethodGet))
	mux.HandleFunc("GET /v1/runs", h.listRuns)
	mux.HandleFunc("/v1/runs", methodNotAllowed(http.MethodGet))
	mux.HandleFunc("GET /v1/runs/{run_id}", h.getRunDetail)
	mux.HandleFunc("POST /v1/runs/{run_id}", h.postRun)
	mux.HandleFunc("/v1/runs/{run_id}", methodNotAllowed(http.MethodGet+", "+http.MethodPost))
	u, err := newUI(h)
	if err != nil {
		return nil, err
	}
	u.routes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && wantsHTML(r) {
			// A browser pointed at the ingress (the -dev banner's URL) gets the dashboard.
			http.Redirect(w, r, "/ui/", http.StatusFound)
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s %s: POST /v1/jobs/{job}, GET /v1/jobs/{job}/ticks, POST /v1/jobs/{job}:run|:backfill, GET /v1/runs, GET /v1/runs/{run_id}, POST /v1/runs/{run_id}:retry|:cancel|:release|:resolve, /ui/, /healthz, /readyz, /metrics, "+OpenAPIPath+" (the API's OpenAPI description)",
			r.Method, cleantext.Clean(r.URL.Path)))
	})
	h.mux = mux
	h.ui = u
	h.handler = tracehttp.Handler(cfg.TracerProvider, tracehttp.WithTrace(cfg.TraceProject, h.sameOrigin(mux)))
	return h, nil
}

// wantsHTML reports whether r is a browser's: it accepts text/html (curl and API
// clients do not ask for it).
func wantsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

// sameOrigin refuses, on every route, a request that a browser sent from a page of
// another origin with a method that can change state (sameorigin.Check): posting a
// run, an operator's action, a dashboard form. Without it any page an operator visits
// could post a text/plain "form" to the API with the operator's access (with -auth none,
// anyone's). Callers that are not browsers send no Origin and pass. The refusal is a 403
// naming the problem: a page under /ui/, JSON elsewhere.
func (h *Handler) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := sameorigin.Check(r)
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		h.log.WarnContext(ctx, "cross-origin request refused", slog.String("method", cleantext.Clean(r.Method)), slog.String("path", cleantext.Clean(r.URL.Path)),
			slog.String("origin", cleantext.Clean(r.Header.Get("Origin"))), slog.String("sec_fetch_site", cleantext.Clean(r.Header.Get("Sec-Fetch-Site"))))
		switch {
		case strings.HasPrefix(r.URL.Path, "/ui/"):
			h.ui.fail(w, http.StatusForbidden, uiPage{}, err.Error())
			return
		case strings.HasPrefix(r.URL.Path, "/v1/jobs/"):
			h.m.request(ctx, OutcomeCrossOrigin, "")
		}
		writeError(w, http.StatusForbidden, err.Error())
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// Outcomes of POST /v1/jobs/{job}, as logged and counted.
const (
	OutcomeNew             = "new"
	OutcomeDuplicate       = "duplicate" // with the run's status
	OutcomeBadRequest      = "bad_request"
	OutcomeUnauthenticated = "unauthenticated"
	OutcomeForbidden       = "forbidden"
	// OutcomeCrossOrigin: a browser posted from a page of another origin (403).
	OutcomeCrossOrigin     = "cross_origin"
	OutcomeUnknownJob      = "unknown_job"
	OutcomeTooLarge        = "too_large"
	OutcomePayloadMismatch = "payload_mismatch"
	OutcomeUnavailable     = "unavailable"
	OutcomeInternal        = "internal_error"
)

// answer is what a request came to: its status, body, outcome and what to log.
type answer struct {
	status  int
	resp    api.Response
	outcome string
	err     error // logged, never sent
	key     *Key
	caller  string
}

func (h *Handler) postJob(w http.ResponseWriter, r *http.Request) {
	if job, action, ok := strings.Cut(r.PathValue("job"), ":"); ok {
		h.postJobAction(w, r, job, action)
		return
	}
	start := time.Now()
	a := h.handleJob(r.Context(), w, r)
	if a.resp.RunID != "" && a.status < 300 {
		w.Header().Set("Location", "/v1/runs/"+a.resp.RunID)
	}
	if a.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, a.status, a.resp)
	h.record(r, a, time.Since(start))
}

// MaxListedJobs is how many accepted jobs the 404 of an unknown job lists.
const MaxListedJobs = 20

// knownJobs lists names for the 404 of an unknown job: sorted, at most MaxListedJobs.
func knownJobs(names []string) string {
	if len(names) == 0 {
		return "no job"
	}
	s := slices.Sorted(slices.Values(names))
	s = slices.Compact(s)
	if len(s) > MaxListedJobs {
		return strings.Join(s[:MaxListedJobs], ", ") + fmt.Sprintf(", … (%d in all)", len(s))
	}
	return strings.Join(s, ", ")
}

func (h *Handler) handleJob(ctx context.Context, w http.ResponseWriter, r *http.Request) answer {
	caller, err := h.cfg.Auth.Authenticate(ctx, r)
	switch {
	case errors.Is(err, auth.ErrForbidden):
		return fail(http.StatusForbidden, OutcomeForbidden, err.Error(), err)
	case err != nil:
		return fail(http.StatusUnauthorized, OutcomeUnauthenticated, err.Error(), err)
	}
	job := r.PathValue("job")
	if err := jobs.ValidName(job); err != nil {
		return fail(http.StatusBadRequest, OutcomeBadRequest, "bad job name in path: "+err.Error(), nil)
	}
	if h.jobs != nil && !h.jobs[job] {
		return fail(http.StatusNotFound, OutcomeUnknownJob, fmt.Sprintf("unknown job %q: the jobs file does not name it (this ingress accepts %s)", job, h.known), nil)
	}
	ns := h.cfg.Namespace
	if hn := h.cfg.NamespaceHeader; hn != "" {
		if v := r.Header.Values(hn); len(v) > 0 {
			if len(v) > 1 || v[0] == "" {
				return fail(http.StatusBadRequest, OutcomeBadRequest, fmt.Sprintf("namespace header %s must be sent once and not empty", hn), nil)
			}
			if err := validNamespace(v[0]); err != nil {
				return fail(http.StatusBadRequest, OutcomeBadRequest, fmt.Sprintf("namespace header %s: %v", hn, err), nil)
			}
			ns = v[0]
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fail(http.StatusRequestEntityTooLarge, OutcomeTooLarge, fmt.Sprintf("body is larger than the limit of %d bytes", h.cfg.MaxBody), nil)
		}
		return fail(http.StatusBadRequest, OutcomeBadRequest, "reading the body: "+err.Error(), err)
	}
	key, err := DeriveKey(ns, job, r.Header, body, h.cfg.Now(), h.cfg.MaxSkew)
	if err != nil {
		return fail(http.StatusBadRequest, OutcomeBadRequest, err.Error(), nil)
	}
	if key.IgnoredIdempotencyKey && h.ignoredKeys.First(ns+"\x00"+job) {
		h.log.WarnContext(ctx, "a request carries Cloud Scheduler's headers and an Idempotency-Key: the scheduler's job name and schedule time key the run, one per tick, and the Idempotency-Key is ignored (a header set on a scheduler job is the same on every tick); logged once per job",
			slog.String("job", job), slog.String("namespace", ns), slog.String("scheduler_job", key.Identity.Key))
	}
	a := h.claim(ctx, key, body)
	if a.resp.LastError != "" && !h.isOperator(ctx, r) {
		// A failed run's error may carry what its target answered: operators only.
		a.resp.LastError = ""
	}
	a.key = key
	if caller != nil {
		a.caller = caller.Email
	}
	return a
}

func fail(status int, outcome, msg string, err error) answer {
	return answer{status: status, outcome: outcome, resp: api.Response{Error: msg}, err: err}
}

// claim claims the run and publishes it when new (or when a duplicate's message may be
// lost). Everything happens before the answer is written.
//
// Once begun, the claim, its publish and the expedite of a failed one are finished even
// if the caller goes away (a lost response, a client timeout): a claim cut short after the
// ledger wrote it would leave a queued run without a message, which the caller's retries
// see as a fresh duplicate and do not republish, until the rescuer's pickup deadline.
// Each step stays bounded by LedgerTimeout or PublishTimeout.
func (h *Handler) claim(ctx context.Context, key *Key, body []byte) answer {
	ctx = context.WithoutCancel(ctx)
	id := key.Identity
	id.Payload = body // kept with the run, so that the worker's rescuer can republish it
	attempt, err := uuid.NewV7()
	if err != nil {
		return fail(http.StatusInternalServerError, OutcomeInternal, "cannot make an attempt ID", err)
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	t0 := time.Now()
	res, err := h.cfg.Ledger.Claim(cctx, &ledger.ClaimParams{
		Identity:      id,
		AttemptID:     attempt.String(),
		PickupTimeout: h.cfg.PickupTimeout,
		Retention:     h.cfg.Retention,
	})
	cancel()
	h.m.claim.Record(ctx, time.Since(t0).Seconds(), metric.WithAttributeSet(h.m.okOrErr(err)))
	if err != nil {
		if errors.Is(err, ledger.ErrTooLarge) {
			return fail(http.StatusRequestEntityTooLarge, OutcomeTooLarge,
				fmt.Sprintf("the payload (%d bytes) is larger than the ledger stores with a run; nothing was claimed", len(body)), err)
		}
		if errors.Is(err, ledger.ErrInvalid) {
			return fail(http.StatusInternalServerError, OutcomeInternal, "the ledger refused the claim", err)
		}
		// Retryable (contended, unavailable) or an error we cannot classify: retrying
		// is safe either way. The claim may have been written before the error (a
		// timeout): if so it stays, made due now, so that the retry republishes it.
		if eerr := h.expedite(ctx, id.RunID, attempt.String()); eerr != nil && !errors.Is(eerr, ledger.ErrNotFound) && !errors.Is(eerr, ledger.ErrLeaseLost) {
			err = errors.Join(err, eerr)
		}
		return h.unavailable(id.RunID, "the ledger is unavailable; retry later (if this request's claim was written, it is kept and republished)", err)
	}
	run := res.Run
	if res.PayloadMismatch {
		return answer{status: http.StatusUnprocessableEntity, outcome: OutcomePayloadMismatch, resp: api.Response{
			RunID: run.ID, Status: run.Status,
			Error: fmt.Sprintf("run %s exists with another payload (sha256 %s, this one %s): the same key must carry the same payload",
				run.ID, run.PayloadHash, id.PayloadHash),
		}}
	}
	msg := &queue.Message{Identity: id, EnqueuedAt: run.CreatedAt, Traceparent: tracehttp.Traceparent(ctx)}
	if res.Created {
		if err := h.publish(ctx, msg); err != nil {
			eerr := h.expedite(ctx, id.RunID, attempt.String())
			return h.unavailable(id.RunID, "Pub/Sub is unavailable; the run is claimed and will be republished: retry later", errors.Join(err, eerr))
		}
		return answer{status: http.StatusAccepted, outcome: OutcomeNew, resp: api.Response{RunID: run.ID, Status: ledger.StatusQueued}}
	}
	a := answer{status: http.StatusAccepted, outcome: OutcomeDuplicate, resp: api.Response{RunID: run.ID, Status: run.Status, Duplicate: true}}
	if run.Status.Terminal() {
		a.status = http.StatusOK
		a.resp.Result = run.Result
		if run.Status == ledger.StatusFailed {
			a.resp.LastError = run.LastError
		}
		return a
	}
	if h.needsRepublish(run) {
		msg.Identity = queue.RunMessage(run).Identity
		if err := h.publish(ctx, msg); err != nil {
			return h.unavailable(id.RunID, "Pub/Sub is unavailable; retry later", err)
		}
	}
	return a
}

// needsRepublish: a queued run past its pickup deadline (an expedited claim whose
// publish failed, or a message nobody picked up) or not written for RepublishAfter (its
// message may be lost), or a running run whose lease expired. The worker deduplicates an
// extra message.
func (h *Handler) needsRepublish(run *ledger.Run) bool {
	now := h.cfg.Now()
	switch run.Status {
	case ledger.StatusQueued:
		return !run.Deadline.After(now) || now.Sub(run.UpdatedAt) >= h.cfg.RepublishAfter
	case ledger.StatusRunning:
		return run.Deadline.Before(now)
	}
	return false
}

func (h *Handler) publish(ctx context.Context, m *queue.Message) error {
	pctx, cancel := context.WithTimeout(ctx, h.cfg.PublishTimeout)
	defer cancel()
	t0 := time.Now()
	_, err := h.cfg.Publisher.Publish(pctx, m)
	h.m.publish.Record(ctx, time.Since(t0).Seconds(), metric.WithAttributeSet(h.m.okOrErr(err)))
	return err
}

// expedite makes a claim this request could not publish due now, so that the caller's
// retry (or any duplicate) republishes it and the rescuer does not wait for its pickup
// deadline. The claim is never deleted: a concurrent duplicate may already have been
// answered 2xx for it, and that answer promises the run. It runs even if the request
// was cancelled.
func (h *Handler) expedite(ctx context.Context, runID, attemptID string) error {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.LedgerTimeout)
	defer cancel()
	if _, err := h.cfg.Ledger.Expedite(ectx, &ledger.ExpediteParams{RunID: runID, AttemptID: attemptID, Retention: h.cfg.Retention}); err != nil {
		return fmt.Errorf("make the claim due now (the rescuer republishes it after its pickup deadline): %w", err)
	}
	return nil
}

func (h *Handler) unavailable(runID, msg string, err error) answer {
	return answer{status: http.StatusServiceUnavailable, outcome: OutcomeUnavailable, resp: api.Response{RunID: runID, Error: msg}, err: err}
}

func (h *Handler) record(r *http.Request, a answer, d time.Duration) {
	outcome := a.outcome
	attrs := []slog.Attr{
		slog.String("outcome", outcome),
		slog.Int("status", a.status),
		slog.String("job", cleantext.Clean(r.PathValue("job"))),
		slog.Float64("latency_ms", float64(d.Microseconds())/1000),
	}
	if a.resp.RunID != "" {
		attrs = append(attrs, slog.String("run_id", a.resp.RunID))
	}
	if a.resp.Duplicate {
		attrs = append(attrs, slog.String("run_status", string(a.resp.Status)))
	}
	if a.key != nil {
		attrs = append(attrs, slog.String("namespace", a.key.Identity.Namespace), slog.String("key_source", a.key.Source),
			slog.String("key", cleantext.Clean(a.key.Identity.Key)))
		if !a.key.Identity.ScheduleTime.IsZero() {
			attrs = append(attrs, slog.Time("schedule_time", a.key.Identity.ScheduleTime))
		}
	}
	if a.caller != "" {
		attrs = append(attrs, slog.String("caller", cleantext.Clean(a.caller)))
	}
	level := slog.LevelInfo
	switch {
	case a.status >= 500:
		level = slog.LevelError
	case a.status >= 400:
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", a.resp.Error))
	}
	if a.err != nil {
		attrs = append(attrs, slog.String("error", cleantext.Clean(a.err.Error())))
	}
	h.log.LogAttrs(r.Context(), level, "job request", attrs...)
	dupStatus := ""
	if a.resp.Duplicate {
		dupStatus = string(a.resp.Status)
	}
	h.m.request(r.Context(), outcome, dupStatus)
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed here; use %s", cleantext.Clean(r.Method), allow))
	}
}

func writeError(w http.ResponseWriter, status int, msg string) { jsonhttp.Error(w, status, msg) }

func writeJSON(w http.ResponseWriter, status int, v any) { jsonhttp.Write(w, status, v) }
