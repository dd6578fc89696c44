package receiver

import (
	"context"
	"log/slog"
	"time"
)

// sweepBatch is how many records of each kind one Store.Sweep call deletes.
const sweepBatch = 500

// Sweep deletes every record and fence whose retention passed, batch by batch, and
// returns how many it deleted. An expired record still there is treated as absent
// anyway: sweeping only frees its space.
func (rc *Receiver) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, rc.opts.StoreTimeout)
		n, err := rc.store.Sweep(cctx, sweepBatch)
		cancel()
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// SweepEvery sweeps every d until ctx ends, logging what each sweep deleted or why it
// failed; it returns when ctx ends. Stores whose backend deletes expired records itself
// (Redis; Spanner with its row deletion policy; Firestore with a TTL policy on expire_at)
// need none.
func (rc *Receiver) SweepEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := rc.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			rc.opts.Logger.WarnContext(ctx, "receiver: sweep failed", slog.Int("deleted", n), slog.Any("error", err))
		} else if n > 0 {
			rc.opts.Logger.InfoContext(ctx, "receiver: swept expired records", slog.Int("deleted", n))
		}
	}
}
