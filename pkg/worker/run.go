package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/internal/jsonhttp"
	"github.com/runonce/runonce/pkg/internal/sameorigin"
	"github.com/runonce/runonce/pkg/queue"
)

// ErrRunning is Run's error when the worker already runs, or ran.
var ErrRunning = errors.New("worker: Run was already called")

// Run pulls deliveries from Config.Subscriber (when set) and runs the rescuer (when
// Config.Republish is set) and the sweeper, until ctx is done or the subscriber fails.
// Then it stops taking deliveries, pulled or pushed, gives running jobs Config.Grace,
// cancels the rest with ErrShutdown (their runs are released and their deliveries
// nacked), waits until every delivery is finished, and returns. It returns nil when ctx
// ended it. Push deliveries served by Handler get the same grace from here: serve
// Handler while Run runs. A worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return ErrRunning
	}
	w.running = true
	w.mu.Unlock()
	defer w.CancelJobs()
	log := w.cfg.Logger

	g, gctx := errgroup.WithContext(ctx)
	stop := context.AfterFunc(gctx, func() {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		log.Info("worker: stopped taking deliveries; running jobs have the grace period, then are cancelled and their runs released",
			slog.Duration("grace", w.cfg.Grace))
		time.AfterFunc(w.cfg.Grace, w.CancelJobs)
	})
	defer stop()
	if w.cfg.Subscriber != nil {
		g.Go(func() error { return w.pull(gctx) })
	}
	g.Go(func() error { w.maintain(gctx); return nil })
	err := g.Wait()
	stop()
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	// Push deliveries (and pulled ones whose receiver gave up waiting) still running:
	// they have the grace, then are cancelled and release their runs.
	w.inflight.Wait()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil {
		log.Error("worker: stopped", slog.Any("error", err))
	} else {
		log.Info("worker: stopped")
	}
	return err
}

// enter counts a delivery in, unless the worker is stopping.
func (w *Worker) enter() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return false
	}
	w.inflight.Add(1)
	return true
}

// pull receives from the subscriber until ctx ends. The subscriber waits for running
// callbacks a second past the grace, so that the nacks of released runs are sent.
func (w *Worker) pull(ctx context.Context) error {
	o := &queue.ReceiveOptions{Concurrency: w.cfg.Concurrency, MaxExtension: w.maxExtension, ShutdownTimeout: w.cfg.Grace + time.Second}
	return w.cfg.Subscriber.Receive(ctx, o, func(ctx context.Context, d *queue.Delivery) {
		if w.Process(ctx, d).Ack {
			d.Ack()
		} else {
			d.Nack()
		}
	})
}

// MaxExtension is how long a pulled message's ack deadline is kept extended, as New
// sized it.
func (w *Worker) MaxExtension() time.Duration { return w.maxExtension }

// NoAuth is a Config.PushAuth that lets every caller push: only where nothing but
// Pub/Sub can reach the worker (tests, the embedded mode). Anyone who can push runs any
// job with any payload.
func NoAuth(h http.Handler) http.Handler { return h }

// Handler serves the worker's HTTP endpoints, to mount on the caller's server:
//
//   - GET /healthz: 200 while the process runs.
//   - GET /readyz: 200 when the ledger and the subscriber answer, else 503 (the cause
//     is logged, never shown: it may name hosts).
//   - POST /v1/push, only when Config.PushAuth is set, behind it: a Pub/Sub push
//     delivery, run as a pulled one is. It answers 204 (Pub/Sub acks) when the run is
//     done, a duplicate of a finished one, failed for good or can never be run; 503
//     with Retry-After (Pub/Sub redelivers after its backoff) when the run must come
//     back later or the worker is stopping; 429 when Config.Concurrency push
//     deliveries are already running. A post a browser sends from a page of another
//     origin is refused with 403 before PushAuth sees it (Pub/Sub sends no Origin).
//
// The server must not time out push requests shorter than the longest job
// (http.Server.WriteTimeout 0): a push request lasts as long as its job.
func (w *Worker) Handler() http.Handler {
	h := http.NewServeMux()
	h.HandleFunc("GET /healthz", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "ok\n") })
	h.HandleFunc("GET /readyz", w.ready)
	if w.cfg.PushAuth != nil {
		// A push runs any job with any payload: a browser must not post one from a page
		// of another origin, whatever PushAuth lets through (NoAuth lets everyone).
		h.Handle("/v1/push", sameorigin.Middleware(w.cfg.PushAuth(http.HandlerFunc(w.push))))
	}
	return h
}

func (w *Worker) ready(rw http.ResponseWriter, r *http.Request) {
	var errs []error
	if err := w.cfg.Ledger.Ping(r.Context()); err != nil {
		errs = append(errs, fmt.Errorf("ledger: %w", err))
	}
	if w.cfg.Subscriber != nil {
		if err := w.cfg.Subscriber.Ping(r.Context()); err != nil {
			errs = append(errs, fmt.Errorf("subscription: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Unauthenticated: never the backend's error text (hosts, database names).
		w.cfg.Logger.Warn("worker: not ready", slog.Any("error", err))
		http.Error(rw, "not ready: the ledger or the subscription is unreachable; see the worker's log", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(rw, "ready\n")
}

func (w *Worker) push(rw http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		pushError(rw, http.StatusMethodNotAllowed, "POST a Pub/Sub push envelope to /v1/push")
		return
	}
	select {
	case w.pushSlots <- struct{}{}:
		defer func() { <-w.pushSlots }()
	default:
		rw.Header().Set("Retry-After", "1")
		pushError(rw, http.StatusTooManyRequests, fmt.Sprintf("worker busy: %d push deliveries are running, its concurrency; Pub/Sub redelivers this one after its backoff", cap(w.pushSlots)))
		return
	}
	d, err := queue.DecodePush(rw, req)
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		pushError(rw, status, err.Error())
		return
	}
	v := w.Process(req.Context(), d)
	if v.Ack {
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	retry := 1
	if !v.RetryAt.IsZero() {
		retry = max(1, int(time.Until(v.RetryAt).Seconds()+0.999))
	}
	rw.Header().Set("Retry-After", strconv.Itoa(retry))
	msg := "run " + d.Message.Identity.RunID + " must come back later: " + v.Outcome
	if v.Outcome == OutcomeStopping {
		msg = "worker stopping: run " + d.Message.Identity.RunID + " not taken; Pub/Sub redelivers it"
	}
	pushError(rw, http.StatusServiceUnavailable, msg)
}

func pushError(w http.ResponseWriter, status int, msg string) { jsonhttp.Error(w, status, msg) }
