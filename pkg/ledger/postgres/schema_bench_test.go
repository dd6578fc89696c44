package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/internal/benchbase"
	"github.com/runonce/runonce/pkg/benchloop"
)

// BenchmarkSchemaFloor alternates rounds, at 8 and 32 goroutines, of the raw chain's two
// statements for a no-op job (an INSERT … ON CONFLICT DO NOTHING of a running row into a
// one-index table, then the UPDATE that completes it) and of the same two statements on
// the ledger's runs table: as the ledger's schema has it, with the claim's history row
// and the completion's event in the row (schema); without any history
// (schema-no-history); on a runs table that keeps only its primary key (schema-pk-only:
// its secondary indexes dropped, whatever the migrations made them, so that its updates
// may be HOT); and on one without the listing's index by creation time, the one index
// whose columns no transition changes (schema-fewer-indexes), which a table of a run's
// mutable columns apart from the others would leave out. With the worker's two ledger
// calls (worker, as BenchmarkWorkerCallsVsChain), it shows how much of the worker's
// distance from the chain is its schema's: no statement shape can take a worker claim and
// completion below what two plain statements on that schema cost. The worker's calls run
// also unbatched (worker-unbatched: Options.Batches −1) and on the table without that
// index (worker-fewer-indexes), which say whether batching and index entries are what
// keep the worker from its schema's floor. And the worker's calls on a runs table that
// keeps only its primary key (worker-pk-only), also with claims that write no history row
// (worker-pk-only-no-history: withoutStartedEvent; a completion writes none already): the
// most that any change of the data model could give the worker's statements, the
// features that need those indexes and that history given up. It reports each rate
// (ops/s) and each over the chain's.
func BenchmarkSchemaFloor(b *testing.B) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := openTest(b, nil)
			pkOnly := openTest(b, nil)
			dropSecondaryIndexes(b, pkOnly, "runs")
			fewer := openTest(b, nil)
			dropIndex(b, fewer, "runs_created_idx")
			unbatched := openTest(b, &Options{Batches: -1})
			bare := openTest(b, nil)
			dropSecondaryIndexes(b, bare, "runs")
			withoutStartedEvent(b, bare)
			chain := rawChain(b, l)
			schema := benchbase.SchemaChain(l.Schema(), true)
			noHistory := benchbase.SchemaChain(l.Schema(), false)
			pk := benchbase.SchemaChain(pkOnly.Schema(), false)
			fewerSchema := benchbase.SchemaChain(fewer.Schema(), true)
			warm(b, l.pool, chain.Claim, chain.Complete, schema.Claim, schema.Complete, noHistory.Claim, noHistory.Complete,
				l.q.acquireQueued, l.q.complete)
			warm(b, pkOnly.pool, pk.Claim, pk.Complete, pkOnly.q.acquireQueued, pkOnly.q.complete)
			warm(b, fewer.pool, fewerSchema.Claim, fewerSchema.Complete, fewer.q.acquireQueued, fewer.q.complete)
			warm(b, unbatched.pool, unbatched.q.acquireQueued, unbatched.q.complete)
			warm(b, bare.pool, bare.q.acquireQueued, bare.q.complete)
			kinds := []benchloop.Kind{
				{Name: "chain", Op: chain.Job(l.pool)},
				{Name: "schema", Op: schema.Job(l.pool)},
				{Name: "schema-no-history", Op: noHistory.Job(l.pool)},
				{Name: "schema-pk-only", Op: pk.Job(pkOnly.pool)},
				{Name: "schema-fewer-indexes", Op: fewerSchema.Job(fewer.pool)},
				{Name: "worker", Op: func(ctx context.Context) error { return workerJob(ctx, l) }},
				{Name: "worker-unbatched", Op: func(ctx context.Context) error { return workerJob(ctx, unbatched) }},
				{Name: "worker-fewer-indexes", Op: func(ctx context.Context) error { return workerJob(ctx, fewer) }},
				{Name: "worker-pk-only", Op: func(ctx context.Context) error { return workerJob(ctx, pkOnly) }},
				{Name: "worker-pk-only-no-history", Op: func(ctx context.Context) error { return workerJob(ctx, bare) }},
			}
			rates := benchloop.Interleaved(b, n, 400, kinds)
			if events := countEvents(b, bare); events != 0 {
				b.Fatalf("worker-pk-only-no-history wrote %d history rows, want none", events)
			}
			if events := countEvents(b, pkOnly); events == 0 {
				b.Fatal("worker-pk-only wrote no history row")
			}
			for _, k := range kinds[1:] {
				b.ReportMetric(rates[k.Name]/rates["chain"], k.Name+"/chain")
			}
		})
	}
}

// rawChain creates the raw chain's table in l's schema and returns its statements.
func rawChain(tb testing.TB, l *Ledger) benchbase.Chain {
	tb.Helper()
	c, err := benchbase.RawChain(tb.Context(), l.pool, l.Schema())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// dropSecondaryIndexes drops every index of l's table but its primary key's.
func dropSecondaryIndexes(tb testing.TB, l *Ledger, table string) {
	tb.Helper()
	ctx := tb.Context()
	rows, err := l.pool.Query(ctx, `SELECT i.indexrelid::regclass::text FROM pg_index i
		WHERE i.indrelid = to_regclass($1) AND NOT i.indisprimary`, pgx.Identifier{l.Schema(), table}.Sanitize())
	if err != nil {
		tb.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	if len(names) == 0 {
		tb.Fatalf("%s has no secondary index to drop", table)
	}
	for _, name := range names {
		if _, err := l.pool.Exec(ctx, `DROP INDEX `+name); err != nil {
			tb.Fatal(err)
		}
	}
}

// dropIndex drops the index name of l's schema.
func dropIndex(tb testing.TB, l *Ledger, name string) {
	tb.Helper()
	if _, err := l.pool.Exec(tb.Context(), `DROP INDEX `+pgx.Identifier{l.Schema(), name}.Sanitize()); err != nil {
		tb.Fatal(err)
	}
}

// withoutStartedEvent takes the started event's insert out of l's worker-claim statements
// (queries/acquire_queued.sql and acquire_queued_batch.sql: their ev CTE), so that a
// claim writes the run's row alone, as a completion does. It fails tb when either
// statement no longer ends with that CTE before its final SELECT: the benchmark would measure nothing.
func withoutStartedEvent(tb testing.TB, l *Ledger) {
	tb.Helper()
	cut := func(name, sql, keep string) string {
		i := strings.Index(sql, ", ev AS (")
		j := strings.Index(sql[max(i, 0):], "\n)\nSELECT ")
		if i < 0 || j < 0 || !strings.Contains(sql[i:i+j], "run_events") {
			tb.Fatalf("%s has no started event's CTE before its final SELECT:\n%s", name, sql)
		}
		return sql[:i] + keep + sql[i+j+2:]
	}
	// The single statement's $7, the worker, is used only by the event: a CTE that
	// nothing reads keeps its type known without running.
	l.q.acquireQueued = cut("acquire_queued.sql", l.q.acquireQueued, ", w AS (SELECT $7::text)")
	l.q.acquireQueuedBatch = cut("acquire_queued_batch.sql", l.q.acquireQueuedBatch, "")
}

// countEvents counts the rows of l's run_events.
func countEvents(tb testing.TB, l *Ledger) int {
	tb.Helper()
	var n int
	if err := l.pool.QueryRow(tb.Context(), `SELECT count(*) FROM `+pgx.Identifier{l.Schema(), "run_events"}.Sanitize()).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
