package benchloop

import (
	"context"
	"slices"
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
// shared machine; each round starts with the next kind, so that no kind always runs
// right after the same other one (a kind pays for the writes the one before it left the
// database to flush). It reports NAME-ops/s for each and returns the rates by name. It
// fails the benchmark on the first error.
//
// With each rate it reports where the cores went (on Linux): NAME-cpu-us/op, the CPU
// this process spent per operation of the kind (clients, handler, service clients), and
// NAME-machine-cpu-us/op, the whole machine's, the services' processes included. On a
// machine that the benchmark saturates a kind's rate is about its cores over the
// latter, so the two kinds' machine CPU per operation says what a ratio owes to
// runonce's own work and what to the work it asks of the services.
func Interleaved(b *testing.B, conc, round int, kinds []Kind) map[string]float64 {
	b.Helper()
	rates, _ := rounds(b, conc, round, kinds)
	for _, kind := range kinds {
		b.ReportMetric(rates[kind.Name], kind.Name+"-ops/s")
	}
	return rates
}

// Rounds is Interleaved for requests over HTTP: 32 goroutines, and each kind's
// NAME-req/s, NAME-p50-ms and NAME-p99-ms reported.
func Rounds(b *testing.B, round int, kinds []Kind) map[string]float64 {
	b.Helper()
	rates, lat := rounds(b, 32, round, kinds)
	for i, kind := range kinds {
		b.ReportMetric(rates[kind.Name], kind.Name+"-req/s")
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds())/1000, kind.Name+"-p50-ms")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Microseconds())/1000, kind.Name+"-p99-ms")
	}
	return rates
}

// Warm runs blocks of n operations of every kind over conc goroutines before the
// benchmark's timer starts, untimed, until the service has stopped getting faster
// (WarmUntilSteady): for one that warms up after it started, such as an emulator on a
// JVM, whose first rounds would otherwise measure its warm-up more than either kind. It
// returns how many operations it ran, to report once the benchmark has run
// (b.ResetTimer deletes any metric reported before). It fails the benchmark on the
// first error.
func Warm(b *testing.B, conc, n int, kinds []Kind) int {
	b.Helper()
	return WarmUntilSteady(b, func() int {
		for _, kind := range kinds {
			if _, _, err := spread(b.Context(), conc, n, kind.Op); err != nil {
				b.Fatalf("warming %s: %v", kind.Name, err)
			}
		}
		return n * len(kinds)
	})
}

// WarmUntilSteady runs block, untimed, until the machine has stopped getting faster: at
// least minWarmBlocks and at most maxWarmBlocks times, stopping after the first block
// whose machine CPU per operation is not 10% below the least of the blocks before it
// (on Linux; elsewhere it runs minWarmBlocks). block runs one block of operations and
// returns how many; WarmUntilSteady returns how many all blocks ran. It is Warm for a
// benchmark that runs its own rounds.
func WarmUntilSteady(b *testing.B, block func() int) int {
	b.Helper()
	var best time.Duration
	ops := 0
	for n := 1; ; n++ {
		c0 := cpuNow()
		k := block()
		ops += k
		c := cpuNow().sub(c0)
		perOp := c.machine / time.Duration(max(k, 1))
		b.Logf("warm-up block %d: %v of machine CPU per operation", n, perOp)
		if n >= maxWarmBlocks || (n >= minWarmBlocks && (!c.ok || perOp > best*9/10)) {
			break
		}
		if best == 0 || perOp < best {
			best = perOp
		}
	}
	return ops
}

// Warm runs from minWarmBlocks to maxWarmBlocks blocks.
const (
	minWarmBlocks = 3
	maxWarmBlocks = 16
)

// rounds runs Interleaved's rounds and returns each kind's rate by name and its
// operations' latencies, sorted, in the order of kinds.
func rounds(b *testing.B, conc, round int, kinds []Kind) (map[string]float64, [][]time.Duration) {
	took := make([]time.Duration, len(kinds))
	cpu := make([]CPUSpent, len(kinds))
	lat := make([][]time.Duration, len(kinds))
	ops := 0
	b.ResetTimer()
	for r, done := 0, 0; done < b.N; r, done = r+1, done+round {
		k := min(round, b.N-done)
		for j := range kinds {
			i := (r + j) % len(kinds)
			kind := kinds[i]
			m := MarkCPU()
			d, l, err := spread(b.Context(), conc, k, kind.Op)
			if err != nil {
				b.Fatalf("%s: %v", kind.Name, err)
			}
			cpu[i].AddSince(m)
			took[i] += d
			lat[i] = append(lat[i], l...)
		}
		ops += k
	}
	b.StopTimer()
	rates := make(map[string]float64, len(kinds))
	for i, kind := range kinds {
		rates[kind.Name] = float64(ops) / took[i].Seconds()
		slices.Sort(lat[i])
		cpu[i].Report(b, kind.Name, ops)
	}
	return rates, lat
}

// spread runs op ops times over conc goroutines and returns the wall time they took and
// each operation's latency.
func spread(ctx context.Context, conc, ops int, op func(context.Context) error) (time.Duration, []time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conc)
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(ops) {
				t0 := time.Now()
				if err := op(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return time.Since(start), slices.Concat(lat...), err
}
