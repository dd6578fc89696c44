package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/internal/benchloop"
)

// BenchmarkSchemaFloor alternates rounds, at 8 and 32 goroutines, of the raw chain's two
// statements for a no-op job (an INSERT … ON CONFLICT DO NOTHING of a running row into a
// one-index table, then the UPDATE that completes it) and of the same two statements on
// the ledger's runs table: as the ledger's schema has it, with a history row each
// (schema); without the history rows (schema-no-history); and on a runs table that keeps
// only its primary key (schema-pk-only: its secondary indexes dropped, whatever the
// migrations made them, so that its updates may be HOT). With the worker's two ledger
// calls (worker, as BenchmarkWorkerCallsVsChain), it shows how much of the worker's
// distance from the chain is its schema's: no statement shape can take a worker claim and
// completion below what two plain statements on that schema cost. It reports each rate
// (ops/s) and each over the chain's.
func BenchmarkSchemaFloor(b *testing.B) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := openTest(b, nil)
			pkOnly := openTest(b, nil)
			dropSecondaryIndexes(b, pkOnly, "runs")
			chain := rawChain(b, l)
			schema, noHistory, pk := schemaStatements(l, true), schemaStatements(l, false), schemaStatements(pkOnly, false)
			warm(b, l.pool, chain.claim, chain.complete, schema.claim, schema.complete, noHistory.claim, noHistory.complete,
				l.q.acquireQueued, l.q.complete)
			warm(b, pkOnly.pool, pk.claim, pk.complete)
			kinds := []benchloop.Kind{
				{Name: "chain", Op: chain.op(l)},
				{Name: "schema", Op: schema.op(l)},
				{Name: "schema-no-history", Op: noHistory.op(l)},
				{Name: "schema-pk-only", Op: pk.op(pkOnly)},
				{Name: "worker", Op: func(ctx context.Context) error { return workerJob(ctx, l) }},
			}
			rates := benchloop.Interleaved(b, n, 400, kinds)
			for _, k := range kinds[1:] {
				b.ReportMetric(rates[k.Name]/rates["chain"], k.Name+"/chain")
			}
		})
	}
}

// twoStatements are a no-op job's claim and completion, each taking the run's key ($1)
// and attempt ID ($2).
type twoStatements struct{ claim, complete string }

// rawChain creates the raw chain's one-index table in l's schema and returns its two
// statements: an INSERT … ON CONFLICT DO NOTHING of a running row, and the UPDATE that
// completes it.
func rawChain(tb testing.TB, l *Ledger) twoStatements {
	tb.Helper()
	table := pgx.Identifier{l.Schema(), "chain"}.Sanitize()
	if _, err := l.pool.Exec(tb.Context(), `CREATE TABLE `+table+` (key text PRIMARY KEY, status text, attempt_id text, deadline timestamptz)`); err != nil {
		tb.Fatal(err)
	}
	return twoStatements{
		`INSERT INTO ` + table + ` (key, status, attempt_id, deadline) VALUES ($1, 'running', $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING`,
		`UPDATE ` + table + ` SET status = 'completed', deadline = NULL WHERE key = $1 AND attempt_id = $2`,
	}
}

// op runs the two statements for a new run on l's pool.
func (s twoStatements) op(l *Ledger) func(context.Context) error {
	return func(ctx context.Context) error {
		key, attempt := uuid.NewString(), uuid.NewString()
		if _, err := l.pool.Exec(ctx, s.claim, key, attempt); err != nil {
			return err
		}
		_, err := l.pool.Exec(ctx, s.complete, key, attempt)
		return err
	}
}

// schemaStatements are the chain's two statements on l's runs table, each with a history
// row when history is set.
func schemaStatements(l *Ledger, history bool) twoStatements {
	runs, events := pgx.Identifier{l.Schema(), "runs"}.Sanitize(), pgx.Identifier{l.Schema(), "run_events"}.Sanitize()
	s := twoStatements{
		`INSERT INTO ` + runs + ` (run_id, namespace, job, run_key, payload_hash, payload,
			status, attempt, attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at)
			VALUES ($1, 'ns', 'noop', $1, 'h', '\x7b7d', 'running', 1, $2, now() + interval '30 seconds', 0, '', now(), now(), now() + interval '14 days')
			ON CONFLICT DO NOTHING`,
		`UPDATE ` + runs + ` SET status = 'completed', attempts_made = attempts_made + 1, deadline = NULL,
			completed_at = now(), updated_at = now(), expire_at = now() + interval '14 days' WHERE run_id = $1 AND attempt_id = $2`,
	}
	if history {
		s.claim = `WITH ins AS (` + s.claim + ` RETURNING run_id)
			INSERT INTO ` + events + ` (run_id, at, kind, attempt) SELECT run_id, now(), 'started', 1 FROM ins`
		s.complete = `WITH up AS (` + s.complete + ` RETURNING run_id)
			INSERT INTO ` + events + ` (run_id, at, kind, attempt) SELECT run_id, now(), 'completed', 1 FROM up`
	}
	return s
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
