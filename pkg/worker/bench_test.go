package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
	firestoreledger "github.com/runonce/runonce/pkg/ledger/firestoreledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

// countingLedger counts the ledger calls a worker makes.
type countingLedger struct {
	ledger.Driver
	calls, completes atomic.Int64
	// acquireNanos and completeNanos sum the time spent in Acquire and Complete.
	acquireNanos, completeNanos atomic.Int64
	done                        chan struct{}
	want                        int64
}

// reset zeroes the call counts and times (not completes, which the benchmarks wait on).
func (c *countingLedger) reset() {
	c.calls.Store(0)
	c.acquireNanos.Store(0)
	c.completeNanos.Store(0)
}

func (c *countingLedger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	c.calls.Add(1)
	t0 := time.Now()
	defer func() { c.acquireNanos.Add(int64(time.Since(t0))) }()
	return c.Driver.Acquire(ctx, p)
}

func (c *countingLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	c.calls.Add(1)
	return c.Driver.Renew(ctx, p)
}

func (c *countingLedger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	c.calls.Add(1)
	t0 := time.Now()
	r, err := c.Driver.Complete(ctx, p)
	c.completeNanos.Add(int64(time.Since(t0)))
	if err == nil && c.completes.Add(1) == c.want {
		close(c.done)
	}
	return r, err
}

func (c *countingLedger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	c.calls.Add(1)
	return c.Driver.Release(ctx, p)
}

// BenchmarkNoopJobs measures no-op jobs completed per second by one worker at
// concurrency 1, 8 and 32: b.N runs are published first, then the worker pulls them all.
// It reports jobs/s and ledger round trips per job (claim + complete, plus renewals).
func BenchmarkNoopJobs(b *testing.B) {
	stacks := map[string]func(b *testing.B) (ledger.Driver, *pubsub.Client){
		"memory+pstest": func(b *testing.B) (ledger.Driver, *pubsub.Client) {
			ps, err := pubsubtest.NewInProcess(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { ps.Close() })
			return memory.New(nil), ps.Client
		},
		"sqlite+pstest": func(b *testing.B) (ledger.Driver, *pubsub.Client) {
			l, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "l.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ps, err := pubsubtest.NewInProcess(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { ps.Close() })
			return l, ps.Client
		},
		"firestore+pubsub-emulators": func(b *testing.B) (ledger.Driver, *pubsub.Client) {
			if os.Getenv("FIRESTORE_EMULATOR_HOST") == "" || os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
				b.Skip("needs FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST (make bench starts them)")
			}
			fc, err := firestore.NewClient(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { fc.Close() })
			l, err := firestoreledger.New(b.Context(), fc, &firestoreledger.Options{Prefix: "bench-" + uuid.NewString()[:8] + "-"})
			if err != nil {
				b.Fatal(err)
			}
			c, err := queue.NewClient(b.Context(), "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return l, c
		},
	}
	for _, stack := range []string{"memory+pstest", "sqlite+pstest", "firestore+pubsub-emulators"} {
		for _, conc := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/concurrency=%d", stack, conc), func(b *testing.B) {
				l, client := stacks[stack](b)
				ctx := b.Context()
				id := strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
				if _, err := queue.EnsureTopic(ctx, client, "t-"+id); err != nil {
					b.Fatal(err)
				}
				if _, err := queue.EnsureSubscription(ctx, client, "t-"+id, "s-"+id, nil); err != nil {
					b.Fatal(err)
				}
				pub := queue.NewPublisher(client, "t-"+id, nil)
				defer pub.Close()
				for i := range b.N {
					if _, err := pub.Publish(ctx, message("noop", fmt.Sprintf("%s-%d", id, i), "{}")); err != nil {
						b.Fatal(err)
					}
				}
				cl := &countingLedger{Driver: l, done: make(chan struct{}), want: int64(b.N)}
				mux := worker.NewMux()
				mux.HandleFunc("noop", func(context.Context, *worker.Job) error { return nil })
				sub := queue.NewSubscriber(client, "s-"+id, nil)
				w, err := worker.New(&worker.Config{Ledger: ledger.New(cl, nil), Handler: mux, Subscriber: sub, Concurrency: conc, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				b.ResetTimer()
				start := time.Now()
				go w.Run(rctx)
				select {
				case <-cl.done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("%d of %d jobs completed in 5m", cl.completes.Load(), b.N)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				cancel()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
				b.ReportMetric(float64(cl.calls.Load())/float64(b.N), "ledger-calls/job")
			})
		}
	}
}

// BenchmarkProcess is the worker's own cost of a delivery, on the in-memory ledger: b.N
// deliveries of new runs of a no-op job, processed one after another with Process (no
// queue), with allocations reported.
func BenchmarkProcess(b *testing.B) {
	mux := worker.NewMux()
	mux.HandleFunc("noop", func(context.Context, *worker.Job) error { return nil })
	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: mux, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.CancelJobs)
	msgs := make([]*queue.Message, b.N)
	for i := range msgs {
		msgs[i] = message("noop", fmt.Sprint("k", i), "")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, m := range msgs {
		if v := w.Process(b.Context(), &queue.Delivery{Message: m, PublishTime: time.Now()}); v.Outcome != worker.OutcomeCompleted {
			b.Fatalf("outcome %s", v.Outcome)
		}
	}
}
