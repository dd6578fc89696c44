package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// RescueOnce republishes the runs whose pickup deadline or lease has passed: each is
// first returned to queued with a fresh deadline by a conditional ledger write, so that
// of several rescuers that list it, exactly one republishes it. It returns how many it
// republished.
func (w *Worker) RescueOnce(ctx context.Context) (int, error) {
	if w.cfg.Republish == nil {
		return 0, errors.New("worker: no republisher configured for the rescuer")
	}
	runs, err := w.cfg.Ledger.ListRescue(ctx, &ledger.ListRescueParams{Limit: 100})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range runs {
		rescued, err := w.cfg.Ledger.Rescue(ctx, &ledger.RescueParams{
			RunID: r.ID, Status: r.Status, Attempt: r.Attempt, Deadline: r.Deadline,
			PickupTimeout: w.cfg.PickupTimeout, Retention: w.cfg.Retention,
		})
		if errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrNotFound) {
			continue // another rescuer, or a worker, got there first
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		msg := queue.RunMessage(rescued)
		pctx, cancel := context.WithTimeout(ctx, w.cfg.LedgerTimeout)
		_, err = w.cfg.Republish.Publish(pctx, msg)
		cancel()
		if err != nil {
			// The run is queued with a fresh deadline: the next round rescues it again.
			w.cfg.Logger.ErrorContext(ctx, "rescue: republish failed; the run will be rescued again after its new deadline",
				slog.String("run_id", r.ID), slog.Time("next_rescue_after", rescued.Deadline), slog.Any("error", err))
			errs = append(errs, err)
			continue
		}
		n++
		w.metrics.rescues.Add(ctx, 1)
		w.cfg.Logger.WarnContext(ctx, "rescue: run republished", slog.String("run_id", r.ID), slog.String("job", r.Job),
			slog.String("was", string(r.Status)), slog.Time("deadline_was", r.Deadline), slog.Int64("attempt", r.Attempt))
	}
	return n, errors.Join(errs...)
}

// SweepOnce deletes up to limit records past their expire_at (for backends without a
// native TTL; where there is one, it deletes what the TTL has not yet) and returns how many.
func (w *Worker) SweepOnce(ctx context.Context, limit int) (int, error) {
	n, err := w.cfg.Ledger.Sweep(ctx, &ledger.SweepParams{Limit: limit})
	if n > 0 {
		w.cfg.Logger.InfoContext(ctx, "sweep: expired records deleted", slog.Int("deleted", n))
	}
	return n, err
}

// maintain runs RescueOnce (with a Republish) and a bounded SweepOnce every
// RescueInterval (with jitter, so that workers started together spread out) until ctx
// is done.
func (w *Worker) maintain(ctx context.Context) {
	for {
		jitter := time.Duration(rand.Int64N(int64(w.cfg.RescueInterval) / 2))
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.RescueInterval/2 + jitter):
		}
		if w.cfg.Republish != nil {
			if _, err := w.RescueOnce(ctx); err != nil && ctx.Err() == nil {
				w.cfg.Logger.WarnContext(ctx, "rescue round failed", slog.Any("error", err))
			}
		}
		if _, err := w.SweepOnce(ctx, 500); err != nil && ctx.Err() == nil {
			w.cfg.Logger.WarnContext(ctx, "sweep failed", slog.Any("error", err))
		}
	}
}
