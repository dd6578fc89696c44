package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
)

// recordingTracer keeps every statement a pool runs, with its arguments, while on.
type recordingTracer struct {
	mu    sync.Mutex
	on    bool
	stmts []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (t *recordingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on {
		t.stmts = append(t.stmts, recorded{d.SQL, d.Args})
	}
	return ctx
}

func (t *recordingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// record returns the statements run while f runs.
func (t *recordingTracer) record(f func()) []recorded {
	t.mu.Lock()
	t.on, t.stmts = true, nil
	t.mu.Unlock()
	f()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = false
	return t.stmts
}

// TestStatementsFindARunByItsKey checks that every statement about given runs reads the
// runs table through its primary key alone, in the plan a prepared statement keeps on
// Open's connections, as the planner sees a ledger in service and a new one:
//
//   - with history: many finished runs, and few queued or running ones in the
//     statistics, as in production. A status test that an index can answer
//     (runs_status_updated_idx leads with the status; runs_rescue_idx holds only queued
//     and running runs) draws the planner to that index, which it believes holds a
//     handful of entries; it then reads every entry of the status, live or dead, to find
//     the one run: a worker's call cost grew with the backlog and with the finished runs
//     not yet vacuumed.
//   - new: tables never analysed, which the planner takes for ten pages. A batched
//     statement joined its runs by a hash over a sequential scan of the runs table, and
//     kept that plan as the table grew, until autovacuum's first ANALYZE: on a new
//     ledger, 8 goroutines' worker claims and completions fell from 1,617 to 375 a
//     second over its first 32,000 runs.
//   - analysed empty: the statements planned on tables analysed before their first run
//     (an operator's ANALYZE of a new ledger). Every index looks alike to the planner
//     then: every statement read all of runs_status_updated_idx, whose last column is
//     the run ID, with the ID as a condition on that column, and a batched statement
//     also read the whole primary key as the outer side of its join to the batch.
//   - swept empty: tables emptied by a sweep (every run expired) and analysed, their
//     pages left: every statement read all of runs_created_idx, with the run ID as a
//     condition on its last column.
//
// A plan made in either empty state is kept as the table grows, until the next ANALYZE
// (BenchmarkNewLedgerGrows).
func TestStatementsFindARunByItsKey(t *testing.T) {
	t.Parallel()
	for _, state := range []struct {
		name string
		fill func(testing.TB, *Ledger) // before the statements run
		plan func(testing.TB, *Ledger) // before their plans are made
	}{
		{name: "with history", fill: fillHistory},
		{name: "new"},
		{name: "analysed empty", plan: emptyAnalysed},
		{name: "swept empty", fill: sweptEmpty},
	} {
		t.Run(state.name, func(t *testing.T) {
			t.Parallel()
			tracer := &recordingTracer{}
			l := tracedLedger(t, tracer, Options{})
			if state.fill != nil {
				state.fill(t, l)
			}
			statementsFindARunByItsKey(t, l, tracer, state.plan)
		})
	}
}

// statementsFindARunByItsKey runs every statement of the worker's path on l and checks
// that each reads by a primary key alone (TestStatementsFindARunByItsKey), in plans made
// after before (if not nil) has run.
func statementsFindARunByItsKey(t *testing.T, l *Ledger, tracer *recordingTracer, before func(testing.TB, *Ledger)) {
	ctx := t.Context()
	stmts := tracer.record(func() {
		queued := func() ledger.Identity {
			id := benchIdentity()
			if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: uuid.NewString()}); err != nil {
				t.Fatal(err)
			}
			return id
		}
		acquire := func(id ledger.Identity) ledger.Fence {
			res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: uuid.NewString()})
			if err != nil || res.Outcome != ledger.OutcomeAcquired {
				t.Fatalf("acquire: %v, %v", res, err)
			}
			return ledger.Fence{RunID: res.Run.ID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
		}
		check := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		f := acquire(queued())
		_, err := l.Renew(ctx, &ledger.RenewParams{Fence: f})
		check("renew", err)
		_, err = l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "e"})
		check("begin effect", err)
		_, err = l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: f, Name: "e"})
		check("complete effect", err)
		_, err = l.Complete(ctx, &ledger.CompleteParams{Fence: f})
		check("complete", err)
		_, err = l.Complete(ctx, &ledger.CompleteParams{Fence: f}) // a repeat: the UPDATE, then lockedRun
		check("repeated complete", err)
		f = acquire(benchIdentity())
		_, err = l.Release(ctx, &ledger.ReleaseParams{Fence: f})
		check("release", err)
		f = acquire(benchIdentity())
		_, err = l.Fail(ctx, &ledger.FailParams{Fence: f, Error: "x"})
		check("fail", err)
		at := time.Now()
		c, err := l.Claim(ctx, &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: uuid.NewString(), Now: at})
		check("claim", err)
		r, err := l.Expedite(ctx, &ledger.ExpediteParams{RunID: c.Run.ID, AttemptID: c.Run.AttemptID, Now: at})
		check("expedite", err)
		_, err = l.Rescue(ctx, &ledger.RescueParams{RunID: r.ID, Status: r.Status, Deadline: r.Deadline, Now: at.Add(time.Hour)})
		check("rescue", err)
		batchRound(t, l, queued(), benchIdentity())
		// An operator's lookup of a run by the start of its ID: a range of the key.
		ids, err := l.ListRunIDs(ctx, &ledger.ListRunIDsParams{Prefix: r.ID[:ledger.MinRunIDPrefix]})
		check("list run IDs", err)
		if !slices.Contains(ids, r.ID) {
			t.Fatalf("ListRunIDs(%s) = %v, without run %s", r.ID[:ledger.MinRunIDPrefix], ids, r.ID)
		}
	})

	if before != nil {
		before(t, l)
	}
	kinds := map[string]bool{}
	for _, s := range stmts {
		kinds[l.queryName(s.sql)] = true
		plan := genericPlan(t, l.pool, s)
		for _, bad := range scansBesidesKeys(plan) {
			t.Errorf("%s reads by %s, not by a primary key", l.queryName(s.sql), bad)
		}
	}
	for _, want := range []string{"acquireQueued", "renew", "complete", "lockedRun", "release", "fail", "expedite", "rescue",
		"acquireQueuedBatch", "completeBatch", "beginEffect", "completeEffect", "listRunIDs"} {
		if !kinds[want] {
			t.Errorf("%s was not run (ran %v)", want, kinds)
		}
	}
}

// batchRound claims the runs ids name in one batched statement (acquireBatch), then
// completes them in another (completeBatch), failing t on any error.
func batchRound(t *testing.T, l *Ledger, ids ...ledger.Identity) {
	t.Helper()
	ctx := t.Context()
	var acqs []*acquireCall
	for _, id := range ids {
		acqs = append(acqs, &acquireCall{in: &ledger.AcquireParams{Identity: id, AttemptID: uuid.NewString()}})
	}
	l.acquireBatch(ctx, acqs)
	var comps []*completeCall
	for _, a := range acqs {
		if a.err != nil {
			t.Fatalf("acquire in a batch: %v", a.err)
		}
		comps = append(comps, &completeCall{in: &ledger.CompleteParams{Fence: ledger.Fence{RunID: a.out.Run.ID, Attempt: a.out.Run.Attempt, AttemptID: a.out.Run.AttemptID}}})
	}
	l.completeBatch(ctx, comps)
	for _, c := range comps {
		if c.err != nil {
			t.Fatalf("complete in a batch: %v", c.err)
		}
	}
}

// plannedLedger opens a ledger that holds 20,000 finished runs, with their histories
// and an effect each, analysed, on a pool whose statements tracer records.
func plannedLedger(t *testing.T) (*Ledger, *pgxpool.Pool, *recordingTracer) {
	t.Helper()
	tracer := &recordingTracer{}
	l := tracedLedger(t, tracer, Options{})
	fillHistory(t, l)
	return l, l.pool, tracer
}

// fillHistory writes 20,000 finished runs into l, with their histories and an effect
// each, and analyses its tables.
func fillHistory(t testing.TB, l *Ledger) {
	t.Helper()
	writeHistory(t, l)
	analyse(t, l)
}

// writeHistory writes fillHistory's runs, histories and effects into l.
func writeHistory(t testing.TB, l *Ledger) {
	t.Helper()
	runs, events, effects := l.tables()
	for _, sql := range []string{
		`INSERT INTO ` + runs + ` (run_id, namespace, job, run_key, payload_hash, status,
			attempt, attempts_made, created_at, updated_at, completed_at, expire_at)
		SELECT 'done-' || n, '', 'job', n::text, 'h', 'completed', 1, 1, now(), now(), now(), now() + interval '1 day'
		FROM generate_series(1, 20000) AS n`,
		`INSERT INTO ` + events + ` (run_id, at, kind, attempt)
		SELECT 'done-' || n, now(), k, 1 FROM generate_series(1, 20000) AS n, unnest(ARRAY['started', 'completed']) AS k`,
		`INSERT INTO ` + effects + ` (effect_key, run_id, name, status, attempt, created_at, updated_at, done_at, expire_at)
		SELECT 'done-' || n || '/e', 'done-' || n, 'e', 'done', 1, now(), now(), now(), now() + interval '1 day'
		FROM generate_series(1, 20000) AS n`,
	} {
		if _, err := l.pool.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
}

// sweptEmpty writes fillHistory's records into l, deletes every one, as a sweep does
// when all have expired, and analyses the tables, whose pages remain.
func sweptEmpty(t testing.TB, l *Ledger) {
	t.Helper()
	writeHistory(t, l)
	runs, events, effects := l.tables()
	for _, table := range []string{runs, events, effects} {
		if _, err := l.pool.Exec(t.Context(), `DELETE FROM `+table); err != nil {
			t.Fatal(err)
		}
	}
	analyse(t, l)
}

// emptyAnalysed empties l's tables, their pages too, and analyses them: a new ledger
// analysed before its first run.
func emptyAnalysed(t testing.TB, l *Ledger) {
	t.Helper()
	runs, events, effects := l.tables()
	if _, err := l.pool.Exec(t.Context(), `TRUNCATE `+runs+`, `+events+`, `+effects); err != nil {
		t.Fatal(err)
	}
	analyse(t, l)
}

// analyse runs ANALYZE on l's tables.
func analyse(t testing.TB, l *Ledger) {
	t.Helper()
	runs, events, effects := l.tables()
	for _, table := range []string{runs, events, effects} {
		if _, err := l.pool.Exec(t.Context(), `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
}

// tables returns the quoted names of l's runs, run_events and effects tables.
func (l *Ledger) tables() (runs, events, effects string) {
	return pgx.Identifier{l.schema, "runs"}.Sanitize(), pgx.Identifier{l.schema, "run_events"}.Sanitize(),
		pgx.Identifier{l.schema, "effects"}.Sanitize()
}

// scansBesidesKeys lists the nodes of plan that read a table other than by looking up
// its primary key.
func scansBesidesKeys(plan map[string]any) []string {
	var bad []string
	node, _ := plan["Node Type"].(string)
	index, _ := plan["Index Name"].(string)
	rel, _ := plan["Relation Name"].(string)
	switch {
	case index != "" && !strings.HasSuffix(index, "_pkey"):
		bad = append(bad, fmt.Sprintf("%s using %s", node, index))
	case index != "" && plan["Index Cond"] == nil:
		bad = append(bad, fmt.Sprintf("%s using %s, whole", node, index))
	case node == "Seq Scan" && rel != "":
		bad = append(bad, fmt.Sprintf("%s on %s", node, rel))
	}
	children, _ := plan["Plans"].([]any)
	for _, c := range children {
		bad = append(bad, scansBesidesKeys(c.(map[string]any))...)
	}
	return bad
}

// queryName names one of l's statements, for messages.
func (l *Ledger) queryName(sql string) string {
	q := l.q
	for name, s := range map[string]string{"claim": q.claim, "acquireQueued": q.acquireQueued, "acquire": q.acquire,
		"renew": q.renew, "complete": q.complete, "release": q.release, "fail": q.fail, "expedite": q.expedite,
		"rescue": q.rescue, "acquireQueuedBatch": q.acquireQueuedBatch, "completeBatch": q.completeBatch,
		"beginEffect": q.beginEffect, "completeEffect": q.completeEffect, "claimBatch": q.claimBatch,
		"claimLatest": q.claimLatest, "lockedRun": q.lockedRun, "get": q.get, "sweep": q.sweep, "listRescue": q.listRescue,
		"listRunIDs": q.listRunIDs} {
		if s == sql {
			return name
		}
	}
	return strings.Join(strings.Fields(sql), " ")
}

// genericPlan returns the generic plan of s (the one a prepared statement keeps),
// explained with its arguments.
func genericPlan(t *testing.T, pool *pgxpool.Pool, s recorded) map[string]any {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE plan_test AS "+s.sql); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "DEALLOCATE plan_test") }()
	params := make([]string, len(s.args))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	var plan []map[string]any
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE plan_test("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, s.args...)...).Scan(&plan); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return plan[0]["Plan"].(map[string]any)
}

// TestOpenKeepsOnePlan checks that Open's connections keep one plan per statement
// (plan_cache_mode force_generic_plan). Under auto, the server can make a custom plan at
// every execution of a batched statement, because one made for the batch's actual length
// looks cheaper than the generic one: in BenchmarkWorkerCallsVsChain at 8 goroutines,
// completeBatch ran on 213 custom plans and no generic one. A DSN that sets
// plan_cache_mode wins. The scans are not kept: they are planned for their arguments.
func TestOpenKeepsOnePlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   string // the DSN's plan_cache_mode; empty: unset
		custom bool   // whether custom plans are expected
	}{{"", false}, {"auto", true}} {
		t.Run(cmp.Or(tc.mode, "unset"), func(t *testing.T) {
			t.Parallel()
			dsn := withParam(t, testDSN(t), "pool_max_conns", "1")
			if tc.mode != "" {
				dsn = withParam(t, dsn, "plan_cache_mode", tc.mode)
			}
			l, err := Open(t.Context(), dsn, &Options{Schema: newSchema(t, dsn)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := t.Context()
			for range 8 {
				batchRound(t, l, benchIdentity(), benchIdentity(), benchIdentity())
			}
			if _, err := l.Sweep(ctx, &ledger.SweepParams{}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ListRescue(ctx, &ledger.ListRescueParams{}); err != nil {
				t.Fatal(err)
			}
			// The pool's one connection ran every statement.
			rows, err := l.pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
			if err != nil {
				t.Fatal(err)
			}
			plans := map[string][2]int64{}
			for rows.Next() {
				var sql string
				var generic, custom int64
				if err := rows.Scan(&sql, &generic, &custom); err != nil {
					t.Fatal(err)
				}
				plans[l.queryName(sql)] = [2]int64{generic, custom}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"sweep", "listRescue"} {
				if p, ok := plans[name]; ok {
					t.Errorf("%s is a prepared statement (%d generic plans, %d custom), want it planned for its arguments", name, p[0], p[1])
				}
			}
			for _, name := range []string{"acquireQueuedBatch", "completeBatch"} {
				p, ok := plans[name]
				switch {
				case !ok:
					t.Errorf("%s is not among the connection's prepared statements (%v)", name, plans)
				case tc.custom && p[1] == 0:
					t.Errorf("%s: %d generic plans and no custom one; with plan_cache_mode=%s in the DSN, want custom plans", name, p[0], tc.mode)
				case !tc.custom && p[1] != 0:
					t.Errorf("%s: %d custom plans in 8 executions (%d generic), want none", name, p[1], p[0])
				}
			}
		})
	}
}

// TestScansUseAnIndex checks that the rescuer's listing and the sweep, which are planned
// for their arguments (planEach), read every table through an index on a ledger with
// history (TestListingPlansUseIndexes checks List's shapes). The sweep's generic plan,
// which Open's connections would otherwise keep, hashes every run's ID with a
// sequential scan of the runs table.
func TestScansUseAnIndex(t *testing.T) {
	t.Parallel()
	l, pool, tracer := plannedLedger(t)
	ctx := t.Context()
	stmts := tracer.record(func() {
		if _, err := l.ListRescue(ctx, &ledger.ListRescueParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Sweep(ctx, &ledger.SweepParams{Limit: 10}); err != nil {
			t.Fatal(err)
		}
	})
	for _, s := range stmts {
		var plan []map[string]any
		if err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+s.sql, s.args...).Scan(&plan); err != nil {
			t.Fatalf("explain %s: %v", l.queryName(s.sql), err)
		}
		for _, bad := range seqScans(plan[0]["Plan"].(map[string]any)) {
			t.Errorf("%s: %s", l.queryName(s.sql), bad)
		}
	}
}

// seqScans lists the sequential scans in plan.
func seqScans(plan map[string]any) []string {
	var out []string
	if plan["Node Type"] == "Seq Scan" {
		out = append(out, fmt.Sprintf("Seq Scan on %v", plan["Relation Name"]))
	}
	children, _ := plan["Plans"].([]any)
	for _, c := range children {
		out = append(out, seqScans(c.(map[string]any))...)
	}
	return out
}

// TestConfigureConnKeepsTheDSNsSettings checks that ConfigureConn sets each planner
// setting a DSN leaves unset, and none that it sets, as a parameter or in options.
func TestConfigureConnKeepsTheDSNsSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want map[string]string
	}{
		{"postgres://db/app", map[string]string{"plan_cache_mode": "force_generic_plan",
			"enable_seqscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off"}},
		{"postgres://db/app?enable_seqscan=on&plan_cache_mode=auto", map[string]string{"plan_cache_mode": "auto",
			"enable_seqscan": "on", "enable_hashjoin": "off", "enable_mergejoin": "off"}},
		{"host=db options='-c enable_hashjoin=on'", map[string]string{"plan_cache_mode": "force_generic_plan",
			"enable_seqscan": "off", "enable_hashjoin": "", "enable_mergejoin": "off"}},
	} {
		cfg, err := pgx.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		ConfigureConn(cfg)
		for name, want := range tc.want {
			if got := cfg.RuntimeParams[name]; got != want {
				t.Errorf("%s: %s = %q, want %q", tc.dsn, name, got, want)
			}
		}
	}
}
