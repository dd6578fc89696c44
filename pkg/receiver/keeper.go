package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// keeper renews a claimed key's lease while its handler runs.
type keeper struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	lost error // why the lease is lost, once it is
}

// keepLease renews p's lease every third of the lease until stop, or until the handler's
// MaxHandlerTime passed. When the store says the lease is lost, or renewals failed for
// so long that the lease may have passed, it cancels the handler's context with the
// cause (wrapping ErrLeaseLost): another request may hold the key.
func (rc *Receiver) keepLease(p *ClaimParams, cancel context.CancelCauseFunc, log *slog.Logger) *keeper {
	k := &keeper{done: make(chan struct{})}
	interval := rc.opts.Lease / 3
	renewed := time.Now() // the claim's, a moment ago
	stopAt := renewed.Add(rc.opts.MaxHandlerTime)
	k.wg.Go(func() {
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-k.done:
				return
			case <-t.C:
			}
			if time.Now().After(stopAt) {
				return // the handler's time is up: the lease runs out by itself
			}
			ctx, c := context.WithTimeout(context.Background(), min(rc.opts.StoreTimeout, interval))
			err := rc.store.Renew(ctx, &RenewParams{Key: p.Key, Token: p.Token, Lease: rc.opts.Lease, Retention: rc.opts.Retention})
			c()
			switch {
			case err == nil:
				renewed = time.Now()
			case errors.Is(err, ErrLeaseLost):
				k.fence(cancel, err)
				return
			default:
				log.Warn("receiver: could not renew the key's lease", slog.Any("error", err))
				if time.Since(renewed) >= rc.opts.Lease-interval {
					k.fence(cancel, fmt.Errorf("%w: no renewal for %s of a %s lease: %w", ErrLeaseLost, time.Since(renewed).Round(time.Millisecond), rc.opts.Lease, err))
					return
				}
			}
			t.Reset(interval)
		}
	})
	return k
}

func (k *keeper) fence(cancel context.CancelCauseFunc, cause error) {
	k.mu.Lock()
	k.lost = cause
	k.mu.Unlock()
	cancel(cause)
}

// stop stops the renewals and returns why the lease was lost, nil if it was not.
func (k *keeper) stop() error {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}
