package workertest

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// BatchBenchItems is how many items one run of BenchmarkBatch works on.
const BatchBenchItems = 10_000

// BenchmarkBatch measures, on the ledger open returns (a backend's conformance harness),
// one run of BatchBenchItems no-op items done three ways in the same benchmark, at
// parallelism 8: "effect", each item its own worker.Effect (the raw effect write: two
// ledger writes per item; a contended or unavailable write is retried, as a job would
// have to);
// "batch", worker.Batch with the default checkpoint of 100;
// "batch-checkpoint=1000". It reports items/s and ledger writes per item (every write
// of the run: claim, effects, renewals, completion). Run it with -benchtime=1x.
func BenchmarkBatch(b *testing.B, open func(tb testing.TB) ledger.Driver) {
	modes := []struct {
		name string
		run  func(ctx context.Context, ids []string, fn worker.ItemFunc) error
	}{
		{"effect", func(ctx context.Context, ids []string, fn worker.ItemFunc) error {
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(worker.DefaultBatchParallelism)
			for _, id := range ids {
				g.Go(func() error {
					// As a job would have to: Firestore contends on a run's concurrent effects,
					// the Spanner emulator runs one read-write transaction at a time.
					for try := 0; ; try++ {
						err := worker.Effect(gctx, "item/"+id, func(ctx context.Context, key string) error { return fn(ctx, id, key) })
						if !ledger.Retryable(err) || try == 50 {
							return err
						}
						time.Sleep(time.Duration(try+1) * 5 * time.Millisecond)
					}
				})
			}
			return g.Wait()
		}},
		{"batch", func(ctx context.Context, ids []string, fn worker.ItemFunc) error {
			_, err := worker.Batch(ctx, "items", ids, fn, nil)
			return err
		}},
		{"batch-checkpoint=1000", func(ctx context.Context, ids []string, fn worker.ItemFunc) error {
			_, err := worker.Batch(ctx, "items", ids, fn, &worker.BatchOptions{Checkpoint: 1000})
			return err
		}},
	}
	ids := make([]string, BatchBenchItems)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%05d", i)
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			l := &writeCounter{Driver: open(b)}
			mux := worker.NewMux()
			var done atomic.Int64
			mux.HandleFunc("batch", func(ctx context.Context, j *worker.Job) error {
				return m.run(ctx, ids, func(ctx context.Context, item, key string) error {
					done.Add(1)
					return nil
				})
			})
			w, err := worker.New(&worker.Config{Ledger: ledger.New(l, nil), Handler: mux, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(w.CancelJobs)
			var elapsed time.Duration
			runs := 0
			for b.Loop() {
				runs++
				key := uuid.NewString()
				id := ledger.Identity{RunID: ledger.KeyedRunID(Namespace, "batch", key), Namespace: Namespace, Job: "batch", Key: key}
				id.PayloadHash = ledger.PayloadHash(nil)
				start := time.Now()
				v := w.Process(b.Context(), &queue.Delivery{
					Message: &queue.Message{Identity: id, EnqueuedAt: time.Now()}, PublishTime: time.Now(),
				})
				elapsed += time.Since(start)
				if v.Outcome != worker.OutcomeCompleted {
					r, _ := l.Get(b.Context(), &ledger.GetParams{RunID: id.RunID})
					b.Fatalf("the run came to %s, not completed: %+v", v.Outcome, r)
				}
			}
			if done.Load() < int64(runs*BatchBenchItems) {
				b.Fatalf("%d items done in %d runs of %d", done.Load(), runs, BatchBenchItems)
			}
			items := float64(runs * BatchBenchItems)
			b.ReportMetric(items/elapsed.Seconds(), "items/s")
			b.ReportMetric(float64(l.writes.Load())/items, "writes/item")
		})
	}
}

// writeCounter counts a ledger's writes.
type writeCounter struct {
	ledger.Driver
	writes atomic.Int64
}

func (c *writeCounter) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	c.writes.Add(1)
	return c.Driver.Acquire(ctx, p)
}

func (c *writeCounter) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	c.writes.Add(1)
	return c.Driver.Renew(ctx, p)
}

func (c *writeCounter) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	c.writes.Add(1)
	return c.Driver.Complete(ctx, p)
}

func (c *writeCounter) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	c.writes.Add(1)
	return c.Driver.Release(ctx, p)
}

func (c *writeCounter) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	c.writes.Add(1)
	return c.Driver.BeginEffect(ctx, p)
}

func (c *writeCounter) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	c.writes.Add(1)
	return c.Driver.CompleteEffect(ctx, p)
}
