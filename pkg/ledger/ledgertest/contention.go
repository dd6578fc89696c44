package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// The shape of RenewalsOutlastContention: holders runs held at once, each renewed
// every third of contentionLease as a worker's lease keeper renews it, while
// writersPerHolder goroutines per run begin and complete effects of it back to back, for
// contentionFor.
const (
	holders          = 8
	writersPerHolder = 1
	contentionLease  = 6 * time.Second
	contentionFor    = 8 * time.Second
)

var contentionTests = map[string]func(*testing.T, Harness){
	// Renewals and effect writes of many runs race one another: the holders of runs
	// whose leases nobody takes over renew a short lease as a worker's lease keeper
	// does (worker.Config.Lease): every third of it, each renewal given until a sixth of
	// the lease before its end (the keeper's self-fence point) as its deadline, a failed
	// one tried again a thirtieth of the lease later, doubling, while a job per run
	// writes effects of it back to back. No renewal may be refused as fenced out
	// (ErrLeaseLost), nor may they keep failing until the lease reaches the self-fence
	// point: a holder that stops its job while its renewals are merely contended leaves
	// its effects to be redone by the next attempt. No effect write may fail either (a
	// job's failed effect write fails the attempt), and every holder completes its run
	// at the end.
	"RenewalsOutlastContention": func(t *testing.T, h Harness) {
		f := setup(t, h)
		runs := make([]*ledger.Run, holders)
		held := make([]time.Time, holders)
		for i := range runs {
			held[i] = time.Now()
			runs[i] = f.hold(newRunID(), contentionLease)
		}
		var (
			stop     = time.Now().Add(contentionFor)
			wg       sync.WaitGroup
			mu       sync.Mutex
			renewals []time.Duration
			failed   atomic.Int64
			effects  atomic.Int64
		)
		for i, r := range runs {
			wg.Go(func() {
				failures := 0 // in a row
				for next := held[i].Add(contentionLease / 3); next.Before(stop); {
					time.Sleep(time.Until(next))
					fenceAt := held[i].Add(contentionLease - contentionLease/6)
					if !time.Now().Before(fenceAt) {
						t.Errorf("holder %d of run %s: no renewal landed since %v: its lease reached the self-fence point, its renewals merely contended",
							i, r.ID, held[i].Format(time.StampMilli))
						return
					}
					sent := time.Now()
					ctx, cancel := context.WithDeadline(f.ctx, fenceAt)
					_, err := f.l.Renew(ctx, &ledger.RenewParams{Fence: fence(r), Lease: contentionLease})
					cancel()
					mu.Lock()
					renewals = append(renewals, time.Since(sent))
					mu.Unlock()
					wait := contentionLease / 3
					switch {
					case err == nil:
						held[i], failures = sent, 0
					case errors.Is(err, ledger.ErrLeaseLost):
						t.Errorf("holder %d of run %s: renewal refused as fenced out while nobody took the run over: %v", i, r.ID, err)
						return
					default:
						wait = min(wait, contentionLease/30<<min(failures, 4))
						failures++
						failed.Add(1)
						t.Logf("holder %d of run %s: renewal failed, tried again in %v: %v", i, r.ID, wait, err)
					}
					next = time.Now().Add(wait)
				}
			})
			for w := range writersPerHolder {
				wg.Go(func() {
					for n := 0; time.Now().Before(stop); n++ {
						name := fmt.Sprintf("w%d-%d", w, n)
						ctx, cancel := context.WithTimeout(f.ctx, contentionLease)
						_, err := f.l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: name})
						if err == nil {
							_, err = f.l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: fence(r), Name: name})
						}
						cancel()
						if err != nil {
							t.Errorf("effect %s of run %s, held by holder %d: %v", name, r.ID, i, err)
							return
						}
						effects.Add(1)
					}
				})
			}
		}
		wg.Wait()
		slices.Sort(renewals)
		if n := len(renewals); n > 0 {
			t.Logf("%d renewals (p50 %v, p99 %v, max %v; %d failed) and %d effects of %d runs under contention",
				n, renewals[n/2], renewals[(n-1)*99/100], renewals[n-1], failed.Load(), effects.Load(), holders)
		}
		if t.Failed() {
			return
		}
		for i, r := range runs {
			if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)}); err != nil {
				t.Errorf("holder %d completes its run %s after the contention: %v", i, r.ID, err)
			}
		}
	},
}
