package benchloop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kind is one side of an interleaved benchmark: a name for its metrics and its operation.
type Kind struct {
	Name string
	Op   func(ctx context.Context) error
}

// Interleaved runs b.N operations of every kind over conc goroutines, in rounds of round
// operations, kinds alternating round by round so that each sees the same load on a
// shared machine; it reports NAME-ops/s for each and returns the rates by name. It fails
// the benchmark on the first error.
func Interleaved(b *testing.B, conc, round int, kinds []Kind) map[string]float64 {
	b.Helper()
	took := make([]time.Duration, len(kinds))
	ops := 0
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		k := min(round, b.N-done)
		for i, kind := range kinds {
			d, err := spread(b.Context(), conc, k, kind.Op)
			if err != nil {
				b.Fatalf("%s: %v", kind.Name, err)
			}
			took[i] += d
		}
		ops += k
	}
	b.StopTimer()
	rates := make(map[string]float64, len(kinds))
	for i, kind := range kinds {
		rates[kind.Name] = float64(ops) / took[i].Seconds()
		b.ReportMetric(rates[kind.Name], kind.Name+"-ops/s")
	}
	return rates
}

// spread runs op ops times over conc goroutines and returns the wall time they took.
func spread(ctx context.Context, conc, ops int, op func(context.Context) error) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(ops) {
				if err := op(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return time.Since(start), err
}
