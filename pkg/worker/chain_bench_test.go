package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// BenchmarkPostgresNoopJobsVsChain alternates rounds, at concurrency 8 and 32, of: the raw
// chain (the same subscriber settings; per message a raw claim INSERT … ON CONFLICT DO
// NOTHING into a one-index table, a raw UPDATE that completes it, and the ack), and one
// worker on a PostgreSQL ledger opened from the plain URL, running a no-op job. Both pull
// all along; a round times the publish of its messages (all at once) until the last is done. It reports jobs/s of each and
// worker/chain (the issue asks for at least 0.8). It needs TEST_DATABASE_URL and
// PUBSUB_EMULATOR_HOST.
func BenchmarkPostgresNoopJobsVsChain(b *testing.B) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" || os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		b.Skip("needs TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST (scripts/services.sh start DIR)")
	}
	const round = 1000
	for _, conc := range []int{8, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			ctx := b.Context()
			schema := "workerbench_" + randomHex()
			u, err := url.Parse(dsn)
			if err != nil {
				b.Fatal(err)
			}
			q := u.Query()
			q.Del("pool_max_conns")
			q.Set("schema", schema)
			u.RawQuery = q.Encode()
			l, err := ledger.Open(ctx, u.String())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			q.Del("schema")
			q.Set("pool_max_conns", "32")
			u.RawQuery = q.Encode()
			pool, err := pgxpool.New(ctx, u.String())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
				pool.Close()
			})
			table := pgx.Identifier{schema, "chain"}.Sanitize()
			if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY, status text, attempt_id text, deadline timestamptz)`); err != nil {
				b.Fatal(err)
			}
			claimSQL := `INSERT INTO ` + table + ` (key, status, attempt_id, deadline) VALUES ($1, 'running', $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING`
			completeSQL := `UPDATE ` + table + ` SET status = 'completed', deadline = NULL WHERE key = $1 AND attempt_id = $2`

			c, err := queue.NewClient(ctx, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			id := randomHex()
			for _, name := range []string{"chain", "worker"} {
				if _, err := queue.EnsureTopic(ctx, c, name+"-t-"+id); err != nil {
					b.Fatal(err)
				}
				if _, err := queue.EnsureSubscription(ctx, c, name+"-t-"+id, name+"-s-"+id, nil); err != nil {
					b.Fatal(err)
				}
			}
			publish := func(name string, n int) {
				pub := queue.NewPublisher(c, name+"-t-"+id, nil)
				defer pub.Close()
				res := make(chan error, n)
				for range n {
					go func() {
						_, err := pub.Publish(ctx, message("noop", uuid.NewString(), "{}"))
						res <- err
					}()
				}
				for range n {
					if err := <-res; err != nil {
						b.Fatal(err)
					}
				}
			}
			// start runs receive until the benchmark ends; wait waits until done reaches want.
			start := func(receive func(ctx context.Context) error) {
				rctx, cancel := context.WithCancel(ctx)
				errc := make(chan error, 1)
				go func() { errc <- receive(rctx) }()
				b.Cleanup(func() { cancel(); <-errc })
			}
			wait := func(want int64, done *atomic.Int64) {
				deadline := time.After(2 * time.Minute)
				for done.Load() < want {
					select {
					case <-deadline:
						b.Fatalf("%d of %d done in 2m", done.Load(), want)
					case <-time.After(time.Millisecond):
					}
				}
			}
			mux := worker.NewMux()
			mux.HandleFunc("noop", func(context.Context, *worker.Job) error { return nil })
			cl := &countingLedger{Ledger: l, done: make(chan struct{}), want: -1}
			wsub := queue.NewSubscriber(c, "worker-s-"+id, nil)
			w, err := worker.New(&worker.Config{Ledger: cl, Handler: mux, Subscriber: wsub, Concurrency: conc, Grace: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			var chainDone atomic.Int64
			sub := queue.NewSubscriber(c, "chain-s-"+id, &queue.SubscriberOptions{Concurrency: conc})
			start(func(ctx context.Context) error {
				return sub.Receive(ctx, nil, func(ctx context.Context, r *queue.Delivery) {
					attempt := uuid.NewString()
					key := r.Message.Identity.RunID
					if _, err := pool.Exec(ctx, claimSQL, key, attempt); err != nil {
						r.Nack()
						return
					}
					if _, err := pool.Exec(ctx, completeSQL, key, attempt); err != nil {
						r.Nack()
						return
					}
					r.Ack()
					chainDone.Add(1)
				})
			})
			start(w.Run)
			var chainTime, workerTime time.Duration
			jobs := 0
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				n := min(round, b.N-done)
				t0 := time.Now()
				publish("chain", n)
				wait(int64(jobs+n), &chainDone)
				chainTime += time.Since(t0)
				t0 = time.Now()
				publish("worker", n)
				wait(int64(jobs+n), &cl.completes)
				workerTime += time.Since(t0)
				jobs += n
			}
			b.StopTimer()
			chain := float64(jobs) / chainTime.Seconds()
			wk := float64(jobs) / workerTime.Seconds()
			b.ReportMetric(chain, "chain-jobs/s")
			b.ReportMetric(wk, "worker-jobs/s")
			b.ReportMetric(wk/chain, "worker/chain")
			b.ReportMetric(float64(cl.calls.Load())/float64(jobs), "ledger-calls/job")
		})
	}
}

func randomHex() string {
	var r [5]byte
	_, _ = rand.Read(r[:])
	return strings.ToLower(hex.EncodeToString(r[:]))
}
