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
// worker on a PostgreSQL ledger opened from the plain URL, running a no-op job; and the
// same raw chain on the ledger's own tables (the runs table with its nine indexes, an
// event row per statement as the ledger's history writes: the floor of two statements on
// that schema); and a second worker on runs claimed first, as the ingress does (the claims
// not timed: the deployed flow, where a worker claim updates a queued run). All pull all along; a round times the publish of its messages (all at
// once) until the last is done. It reports jobs/s of each, worker/chain (the issue asks
// for at least 0.8) and worker/schema-chain. It needs TEST_DATABASE_URL and
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
			// The same chain on the ledger's own tables (its runs table's indexes, the
			// history's inserts): the floor of these two statements on that schema.
			runs, events := pgx.Identifier{schema, "runs"}.Sanitize(), pgx.Identifier{schema, "run_events"}.Sanitize()
			schemaClaimSQL := `WITH ins AS (INSERT INTO ` + runs + ` (run_id, namespace, job, run_key, payload_hash, payload,
				status, attempt, attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at)
				VALUES ($1, 'ns', 'noop', $1, 'h', '\x7b7d', 'running', 1, $2, now() + interval '30 seconds', 0, '', now(), now(), now() + interval '14 days')
				ON CONFLICT DO NOTHING RETURNING run_id)
				INSERT INTO ` + events + ` (run_id, at, kind, attempt) SELECT run_id, now(), 'started', 1 FROM ins`
			schemaCompleteSQL := `WITH up AS (UPDATE ` + runs + ` SET status = 'completed', attempts_made = attempts_made + 1, deadline = NULL,
				completed_at = now(), updated_at = now(), expire_at = now() + interval '14 days' WHERE run_id = $1 AND attempt_id = $2 RETURNING run_id)
				INSERT INTO ` + events + ` (run_id, at, kind, attempt) SELECT run_id, now(), 'completed', 1 FROM up`
			claimSQL := `INSERT INTO ` + table + ` (key, status, attempt_id, deadline) VALUES ($1, 'running', $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING`
			completeSQL := `UPDATE ` + table + ` SET status = 'completed', deadline = NULL WHERE key = $1 AND attempt_id = $2`

			c, err := queue.NewClient(ctx, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			id := randomHex()
			for _, name := range []string{"chain", "schema", "worker", "claimed"} {
				if _, err := queue.EnsureTopic(ctx, c, name+"-t-"+id); err != nil {
					b.Fatal(err)
				}
				if _, err := queue.EnsureSubscription(ctx, c, name+"-t-"+id, name+"-s-"+id, nil); err != nil {
					b.Fatal(err)
				}
			}
			// messages returns n messages of new runs; with claimed, their runs are claimed
			// first, as the ingress does (not timed).
			messages := func(n int, claimed bool) []*queue.Message {
				msgs := make([]*queue.Message, n)
				res := make(chan error, n)
				sem := make(chan struct{}, 32)
				for i := range msgs {
					msgs[i] = message("noop", uuid.NewString(), "{}")
					go func() {
						var err error
						if claimed {
							sem <- struct{}{}
							_, err = l.Claim(ctx, &ledger.ClaimParams{Identity: msgs[i].Identity, AttemptID: uuid.NewString()})
							<-sem
						}
						res <- err
					}()
				}
				for range n {
					if err := <-res; err != nil {
						b.Fatal(err)
					}
				}
				return msgs
			}
			publish := func(name string, msgs []*queue.Message) {
				pub := queue.NewPublisher(c, name+"-t-"+id, nil)
				defer pub.Close()
				n := len(msgs)
				res := make(chan error, n)
				for _, m := range msgs {
					go func() {
						_, err := pub.Publish(ctx, m)
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
			// chain receives name's subscription, running claim and complete per message.
			claimNanos := map[string]*atomic.Int64{"chain": new(atomic.Int64), "schema": new(atomic.Int64)}
			chain := func(name, claim, complete string, done *atomic.Int64) {
				sub := queue.NewSubscriber(c, name+"-s-"+id, &queue.SubscriberOptions{Concurrency: conc})
				start(func(ctx context.Context) error {
					return sub.Receive(ctx, nil, func(ctx context.Context, r *queue.Delivery) {
						attempt := uuid.NewString()
						key := r.Message.Identity.RunID
						t0 := time.Now()
						if _, err := pool.Exec(ctx, claim, key, attempt); err != nil {
							r.Nack()
							return
						}
						claimNanos[name].Add(int64(time.Since(t0)))
						if _, err := pool.Exec(ctx, complete, key, attempt); err != nil {
							r.Nack()
							return
						}
						r.Ack()
						done.Add(1)
					})
				})
			}
			var chainDone, schemaDone atomic.Int64
			chain("chain", claimSQL, completeSQL, &chainDone)
			chain("schema", schemaClaimSQL, schemaCompleteSQL, &schemaDone)
			start(w.Run)
			// The same worker's code on runs the ingress claimed first (the deployed flow).
			cl2 := &countingLedger{Ledger: l, done: make(chan struct{}), want: -1}
			w2, err := worker.New(&worker.Config{Ledger: cl2, Handler: mux, Subscriber: queue.NewSubscriber(c, "claimed-s-"+id, nil), Concurrency: conc, Grace: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			start(w2.Run)
			var chainTime, schemaTime, workerTime, claimedTime time.Duration
			jobs := 0
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				n := min(round, b.N-done)
				t0 := time.Now()
				publish("chain", messages(n, false))
				wait(int64(jobs+n), &chainDone)
				chainTime += time.Since(t0)
				t0 = time.Now()
				publish("schema", messages(n, false))
				wait(int64(jobs+n), &schemaDone)
				schemaTime += time.Since(t0)
				t0 = time.Now()
				publish("worker", messages(n, false))
				wait(int64(jobs+n), &cl.completes)
				workerTime += time.Since(t0)
				msgs := messages(n, true)
				t0 = time.Now()
				publish("claimed", msgs)
				wait(int64(jobs+n), &cl2.completes)
				claimedTime += time.Since(t0)
				jobs += n
			}
			b.StopTimer()
			raw := float64(jobs) / chainTime.Seconds()
			onSchema := float64(jobs) / schemaTime.Seconds()
			wk := float64(jobs) / workerTime.Seconds()
			b.ReportMetric(raw, "chain-jobs/s")
			b.ReportMetric(onSchema, "schema-chain-jobs/s")
			b.ReportMetric(wk, "worker-jobs/s")
			b.ReportMetric(wk/raw, "worker/chain")
			b.ReportMetric(wk/onSchema, "worker/schema-chain")
			claimed := float64(jobs) / claimedTime.Seconds()
			b.ReportMetric(claimed, "claimed-worker-jobs/s")
			b.ReportMetric(claimed/raw, "claimed-worker/chain")
			b.ReportMetric(float64(cl2.acquireNanos.Load())/1e6/float64(jobs), "claimed-acquire-ms")
			b.ReportMetric(float64(cl.calls.Load())/float64(jobs), "ledger-calls/job")
			b.ReportMetric(float64(claimNanos["chain"].Load())/1e6/float64(jobs), "chain-claim-ms")
			b.ReportMetric(float64(claimNanos["schema"].Load())/1e6/float64(jobs), "schema-claim-ms")
			b.ReportMetric(float64(cl.acquireNanos.Load())/1e6/float64(jobs), "acquire-ms")
			b.ReportMetric(float64(cl.completeNanos.Load())/1e6/float64(jobs), "complete-ms")
		})
	}
}

func randomHex() string {
	var r [5]byte
	_, _ = rand.Read(r[:])
	return strings.ToLower(hex.EncodeToString(r[:]))
}
