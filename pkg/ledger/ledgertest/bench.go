package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
)

// Benchmark measures the operations every backend shares, the same way for each: the
// ingress claim of a new run (at 1, 8 and 32 goroutines), a duplicate claim, a worker
// claim, a renewal and a completion. Run it with -benchmem; compare backends with
// benchstat.
func Benchmark(b *testing.B, h Harness) {
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("ClaimNew/goroutines=%d", n), func(b *testing.B) {
			l := ledger.New(h.Open(b), nil)
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = newRunID()
			}
			benchloop.Run(b, n, func(ctx context.Context, i int) error {
				_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: identity(ids[i]), AttemptID: uuid.NewString()})
				return err
			})
		})
	}
	b.Run("ClaimDuplicate", func(b *testing.B) {
		l := ledger.New(h.Open(b), nil)
		id := newRunID()
		if _, err := l.Claim(b.Context(), &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString()}); err != nil {
			b.Fatal(err)
		}
		benchloop.Run(b, 1, func(ctx context.Context, i int) error {
			_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString()})
			return err
		})
	})
	b.Run("Acquire", func(b *testing.B) {
		l := ledger.New(h.Open(b), nil)
		ids := claimed(b, l, b.N)
		benchloop.Run(b, 1, func(ctx context.Context, i int) error {
			_, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: identity(ids[i]), AttemptID: uuid.NewString(), Lease: time.Minute})
			return err
		})
	})
	b.Run("Renew", func(b *testing.B) {
		l := ledger.New(h.Open(b), nil)
		r := acquired(b, l, 1)[0]
		benchloop.Run(b, 1, func(ctx context.Context, i int) error {
			_, err := l.Renew(ctx, &ledger.RenewParams{Fence: fence(r), Lease: time.Minute})
			return err
		})
	})
	b.Run("Complete", func(b *testing.B) {
		l := ledger.New(h.Open(b), nil)
		runs := acquired(b, l, b.N)
		benchloop.Run(b, 1, func(ctx context.Context, i int) error {
			_, err := l.Complete(ctx, &ledger.CompleteParams{Fence: fence(runs[i])})
			return err
		})
	})
}

// claimed prepares n queued runs, outside the timer.
func claimed(b *testing.B, l *ledger.Ledger, n int) []string {
	b.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = newRunID()
	}
	prepare(b, ids, func(ctx context.Context, id string) error {
		_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString()})
		return err
	})
	return ids
}

// acquired prepares n running runs, outside the timer.
func acquired(b *testing.B, l *ledger.Ledger, n int) []*ledger.Run {
	b.Helper()
	ids := claimed(b, l, n)
	runs := make([]*ledger.Run, n)
	var mu sync.Mutex
	idx := map[string]int{}
	for i, id := range ids {
		idx[id] = i
	}
	prepare(b, ids, func(ctx context.Context, id string) error {
		res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: time.Hour})
		if err != nil {
			return err
		}
		mu.Lock()
		runs[idx[id]] = res.Run
		mu.Unlock()
		return nil
	})
	return runs
}

func prepare(b *testing.B, ids []string, fn func(context.Context, string) error) {
	b.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return
				}
				if err := fn(b.Context(), ids[i]); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
