package postgres

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger/ledgertest"
)

// writeTracer counts a connection's statements, each as a write when the schema's tables
// changed across it (digest, taken on another connection before and after, differs) and
// as a read otherwise. It counts only while on is set.
type writeTracer struct {
	on     atomic.Bool
	digest func(ctx context.Context) string
	mu     sync.Mutex // guards before and ops: the ledger may run a statement on a goroutine of its own
	before string
	ops    ledgertest.Ops
}

// take returns the statements counted since the last take.
func (w *writeTracer) take() ledgertest.Ops {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.ops
	w.ops = ledgertest.Ops{}
	return ops
}

func (w *writeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if w.on.Load() {
		d := w.digest(ctx)
		w.mu.Lock()
		w.before = d
		w.mu.Unlock()
	}
	return ctx
}

func (w *writeTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if !w.on.Load() {
		return
	}
	d := w.digest(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if d != w.before {
		w.ops.Writes++
	} else {
		w.ops.Reads++
	}
}

// schemaDigest returns a digest of every row of every table of schema, each row with its
// xmin, so that a statement that rewrites a row with the same values changes it too.
func schemaDigest(t *testing.T, pool *pgxpool.Pool, schema string) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name`, schema)
		if err != nil {
			t.Errorf("list the tables of %s: %v", schema, err)
			return ""
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("list the tables of %s: %v", schema, err)
			return ""
		}
		var all strings.Builder
		for _, table := range tables {
			var d string
			err := pool.QueryRow(ctx, `SELECT coalesce(md5(string_agg(t.xmin::text || ':' || t::text, ',' ORDER BY t::text)), '') FROM `+
				pgx.Identifier{schema, table}.Sanitize()+` t`).Scan(&d)
			if err != nil {
				t.Errorf("digest %s.%s: %v", schema, table, err)
			}
			all.WriteString(table + "=" + d + ";")
		}
		return all.String()
	}
}

// TestCapacityOps measures a run's operations on the ledger, each statement a write when
// it changed the schema's tables and a read otherwise (statements are one transaction
// each, TestOneStatementPerTransition), and checks them against PostgreSQL's row of
// docs/capacity.md.
func TestCapacityOps(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	plain, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one connection: the tracer's before and after are one statement's
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	tracer := &writeTracer{digest: schemaDigest(t, plain, schema)}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := New(t.Context(), pool, &Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	tracer.on.Store(true)
	got := ledgertest.MeasureRunOps(t, l, tracer.take)
	ledgertest.CheckCapacityTable(t, "PostgreSQL", got)
}
