package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/queue"
)

// Pull receives runs from sub until ctx is done. Then it stops taking deliveries, lets
// running jobs finish within grace, and cancels the rest (their runs are released and
// their messages nacked). sub's ShutdownTimeout must exceed grace, so that those nacks
// are sent before Receive returns.
func (w *Worker) Pull(ctx context.Context, sub *queue.Subscriber, grace time.Duration) error {
	stop := context.AfterFunc(ctx, func() {
		w.cfg.Logger.Info("worker: stopped taking deliveries; running jobs have the grace period", slog.Duration("grace", grace))
		time.AfterFunc(grace, w.CancelJobs)
	})
	defer stop()
	return sub.Receive(ctx, func(ctx context.Context, r *queue.Received) {
		if w.Deliver(ctx, r).Ack {
			r.Ack()
		} else {
			r.Nack()
		}
	})
}

// Deliver runs one received message through Process; a message that is not a runonce
// message is acked (it can never be run) and logged.
func (w *Worker) Deliver(ctx context.Context, r *queue.Received) Verdict {
	if r.Err != nil {
		w.cfg.Logger.ErrorContext(ctx, "message is not a runonce run; acked and dropped", slog.String("message_id", r.ID), slog.Any("error", r.Err))
		return w.verdict(ctx, Verdict{Ack: true, Outcome: OutcomeDropped})
	}
	return w.Process(ctx, &Delivery{Message: r.Message, DeliveryAttempt: r.DeliveryAttempt, PublishTime: r.PublishTime})
}

// PushHandler returns the handler of POST /v1/push: it verifies the push subscription's
// token with authn, decodes the push envelope and runs the same code as Pull. It answers
// 204 (Pub/Sub acks) when the run is done, a duplicate of a finished one, failed for good
// or can never be run, 503 with Retry-After (Pub/Sub redelivers after its backoff) when
// the run must come back later, and 429 when Config.PushConcurrency deliveries are
// already running.
func (w *Worker) PushHandler(authn auth.Authenticator) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			rw.Header().Set("Allow", http.MethodPost)
			pushError(rw, http.StatusMethodNotAllowed, "POST a Pub/Sub push envelope to /v1/push")
			return
		}
		if _, err := authn.Authenticate(req.Context(), req); err != nil {
			status := http.StatusUnauthorized
			if errors.Is(err, auth.ErrForbidden) {
				status = http.StatusForbidden
			}
			pushError(rw, status, err.Error())
			return
		}
		if w.pushSlots != nil {
			select {
			case w.pushSlots <- struct{}{}:
				defer func() { <-w.pushSlots }()
			default:
				rw.Header().Set("Retry-After", "1")
				pushError(rw, http.StatusTooManyRequests, fmt.Sprintf("worker busy: %d push deliveries are running, its concurrency; Pub/Sub redelivers this one after its backoff", cap(w.pushSlots)))
				return
			}
		}
		rec, err := queue.DecodePush(rw, req)
		if err != nil {
			status := http.StatusBadRequest
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			pushError(rw, status, err.Error())
			return
		}
		v := w.Deliver(req.Context(), rec)
		if v.Ack {
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		retry := 1
		if !v.RetryAt.IsZero() {
			retry = max(1, int(time.Until(v.RetryAt).Seconds()+0.999))
		}
		rw.Header().Set("Retry-After", strconv.Itoa(retry))
		pushError(rw, http.StatusServiceUnavailable, "run "+rec.Message.Identity.RunID+" must come back later: "+v.Outcome)
	})
}

func pushError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
