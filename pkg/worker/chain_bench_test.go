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

	"github.com/runonce/runonce/internal/benchbase"
	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
)

// BenchmarkPostgresNoopJobsVsChain alternates rounds, at concurrency 8 and 32, of: the raw
// chain (the same subscriber settings; per message a raw claim INSERT … ON CONFLICT DO
// NOTHING into a one-index table, a raw UPDATE that completes it, and the ack), and one
// worker on a PostgreSQL ledger opened from the plain URL, running a no-op job; and the
// same raw chain on the ledger's own tables (the runs table with its five indexes, the
// history as the ledger writes it: the claim's event row, the completion's event in the
// run's row; the floor of two statements on that schema); and a second worker on runs
// claimed first, as the ingress does (the claims not timed: the deployed flow, where a
// worker claim updates a queued run). All pull all along; a round times the publish of
// its messages (all at once) until the last is done, after untimed rounds of every side
// until the emulator has stopped getting faster (warm-jobs). It reports jobs/s of each,
// worker/chain (the issue asks for at least 0.8) and worker/schema-chain, and each
// side's CPU per job. It needs TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST.
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
			rawSQL, err := benchbase.RawChain(ctx, pool, schema)
			if err != nil {
				b.Fatal(err)
			}
			// The same chain on the ledger's own tables (its runs table's indexes, the
			// history it keeps): the floor of these two statements on that schema.
			schemaSQL := benchbase.SchemaChain(schema, true)

			h := newChainBench(b, "bench", l, conc, "chain", "schema", "worker", "claimed")
			// chain runs claim and complete per message on name's side.
			claimNanos := map[string]*atomic.Int64{"chain": new(atomic.Int64), "schema": new(atomic.Int64)}
			chain := func(name string, c benchbase.Chain, done *atomic.Int64) {
				h.chain(name, func(ctx context.Context, key string) error {
					attempt := uuid.NewString()
					t0 := time.Now()
					if _, err := pool.Exec(ctx, c.Claim, key, attempt); err != nil {
						return err
					}
					claimNanos[name].Add(int64(time.Since(t0)))
					_, err := pool.Exec(ctx, c.Complete, key, attempt)
					return err
				}, done)
			}
			var chainDone, schemaDone atomic.Int64
			chain("chain", rawSQL, &chainDone)
			chain("schema", schemaSQL, &schemaDone)
			cl := h.worker("worker")
			// The same worker's code on runs the ingress claimed first (the deployed flow).
			cl2 := h.worker("claimed")
			sides := []side{{"chain", false, &chainDone}, {"schema", false, &schemaDone},
				{"worker", false, &cl.completes}, {"claimed", true, &cl2.completes}}
			warmed := h.warm(round, sides...)
			cl.reset()
			cl2.reset()
			for _, n := range claimNanos {
				n.Store(0)
			}
			rate := h.rounds(round, sides...)
			b.ReportMetric(float64(warmed), "warm-jobs")
			jobs := b.N
			raw, onSchema, wk, claimed := rate["chain"], rate["schema"], rate["worker"], rate["claimed"]
			b.ReportMetric(raw, "chain-jobs/s")
			b.ReportMetric(onSchema, "schema-chain-jobs/s")
			b.ReportMetric(wk, "worker-jobs/s")
			b.ReportMetric(wk/raw, "worker/chain")
			b.ReportMetric(wk/onSchema, "worker/schema-chain")
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
