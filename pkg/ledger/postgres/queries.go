package postgres

import (
	"embed"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
)

// The statements, one per transition, each in its file under queries/ (read by
// statement). Each is a single statement (one round trip) run
// outside any explicit transaction, under READ COMMITTED. In every statement that takes
// the time, $1 is the caller's Now (NULL for the database's clock) and {now} stands for
// coalesce($1, now()); durations are passed in whole microseconds.
//
// Three patterns recur:
//
//   - Insert or read (Claim): INSERT … ON CONFLICT DO NOTHING, and a read of the existing
//     row from the statement's snapshot. A duplicate writes nothing and locks nothing; in
//     the rare race where the conflicting row was committed after the snapshot, the
//     statement returns no row and a second one reads it (see queries/claim.sql).
//   - Upsert that must return the row (Acquire, BeginEffect): INSERT … ON CONFLICT
//     DO UPDATE locks the conflicting row, even one committed after the statement's
//     snapshot was taken, but RETURNING gives it only if it was updated. Acquire and BeginEffect update only when the transition applies, or when the
//     locked row is newer than the snapshot (no version with the same ctid is visible to
//     it), in which case the update is a no-op written only to return the latest row;
//     otherwise the snapshot already holds the latest version, which a UNION ALL branch
//     reads (under the lock the upsert took), so a held or terminal run is not rewritten.
//     ON CONFLICT DO NOTHING followed by a SELECT in the same statement alone is not
//     enough: under READ COMMITTED the SELECT uses the statement's snapshot and misses a
//     row that a concurrent claim committed in between, returning nothing: Claim reads
//     again in that race, the other upserts lock instead.
//   - Fenced UPDATE (Renew, Complete, Release, Fail, Rescue, Expedite): the WHERE
//     carries the fence; PostgreSQL re-checks it on the latest version of a concurrently
//     updated row. When nothing was updated, a second statement (locked_run.sql) reads the
//     record FOR SHARE, which waits for a concurrent writer and returns the latest
//     version, so that the caller can tell an idempotent repeat from a fenced-out
//     attempt. The read is not a branch of the UPDATE's statement: every execution would
//     pay to start it, and it runs only when a transition does not apply.
//   - Effects lock their run FOR SHARE first, so that a takeover cannot slip between the
//     fence check and the effect write.
//
// A statement about given runs finds each by its primary key alone: it tests the status
// as {r.status}, an expression that no index holds. A plain r.status = 'running' draws
// the planner, whose statistics show few queued or running runs among many finished ones,
// to an index that can answer it (runs_status_updated_idx leads with the status,
// runs_rescue_idx holds only queued and running runs); to find the one run it then reads
// every entry of that status, live or dead, so that each worker call cost more as the
// backlog grew and as finished runs awaited vacuum (TestStatementsFindARunByItsKey).
//
// Nor may the statistics choose another way to a run. On tables analysed while empty, or
// emptied by a sweep, every index looks alike to the planner, and a plan made then is
// kept as the table grows:
//
//   - The listing's indexes end with the run ID in the C collation (migration 0009),
//     which no statement here compares in, so that the ID cannot be a condition on them.
//   - A batched statement also tests r.run_id = ANY($2), the batch's IDs: its join to
//     the batch read the whole primary key as the outer side otherwise.
//   - A worker claim's INSERT of an absent run leaves an existing one to its ON CONFLICT
//     DO NOTHING (which probes the key), with no NOT EXISTS probe: that one needs only
//     the ID, which an index-only scan of any index holding it can answer, whole.
const (
	runCols = `run_id, namespace, job, run_key, schedule_time, payload_hash, payload, status, attempt,
	attempt_id, deadline, not_before, attempts_made, last_error, created_at, updated_at,
	completed_at, expire_at, result, progress`
	// newRunCols are the columns a statement that creates a run sets (the others keep
	// their defaults), in the order of its VALUES.
	newRunCols = `run_id, namespace, job, run_key, schedule_time, payload_hash, payload, status, attempt,
	attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at`
	effectCols = `effect_key, run_id, name, status, attempt, ref, created_at, updated_at, done_at, expire_at`

	nowExpr = `coalesce($1::timestamptz, now())`
	// statusExpr is a run's status as no index holds it (see above).
	statusExpr = `(r.status || '')`
	// rfc3339 renders a timestamptz as Go's time.RFC3339Nano does for a UTC time.
	rfc3339 = `rtrim(rtrim(to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'`
)

// cols prefixes each column of list with alias.
func cols(alias, list string) string {
	fields := strings.Split(list, ",")
	for i, f := range fields {
		fields[i] = alias + "." + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}

func us(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }

// claimable: the existing row r may be taken by a worker claim at {now}.
// A run whose payload hash differs from the claim's is never claimable: the message is
// not the one the run was accepted with.
const claimable = `(r.payload_hash = EXCLUDED.payload_hash AND ((r.status = 'queued' AND (r.not_before IS NULL OR r.not_before <= {now}))
	OR (r.status = 'running' AND r.deadline < {now})))`

const takeover = `(r.payload_hash = EXCLUDED.payload_hash AND r.status = 'running' AND r.deadline < {now})`

//go:embed queries/*.sql
var queryFiles embed.FS

// statement returns the statement in queries/name.sql: the file without its leading
// comment lines (the statement's documentation) and its final newline.
func statement(name string) string {
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // the files are embedded: a missing one is a typo that every test finds
	}
	s := string(b)
	for strings.HasPrefix(s, "--") {
		_, s, _ = strings.Cut(s, "\n")
	}
	return strings.TrimSuffix(s, "\n")
}

// queries are the statements with the schema's table names filled in.
type queries struct {
	claim, claimBatch, claimLatest, acquire, acquireQueued, acquireQueuedBatch, completeBatch, renew, complete, fail, release string
	rescue, expedite, lockedRun                                                                                               string
	get, lockRun, getEffect, beginEffect, completeEffect, listRescue, sweep                                                   string
	getWithHistory, lockForOperator, writeRun, addEvent, listRuns, listEffects, listRunIDs, lockEffect, writeEffect           string
}

func buildQueries(schema string) queries {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	r := strings.NewReplacer(
		"{claimable}", claimable,
		"{takeover}", takeover,
	)
	r2 := strings.NewReplacer(
		"{runs}", prefix+"runs",
		"{effects}", prefix+"effects",
		"{events}", prefix+"run_events",
		"{maxHistory}", strconv.Itoa(ledger.MaxHistory),
		"{up.runCols}", cols("up", runCols),
		"{now}", nowExpr,
		"{rfc3339:r.deadline}", strings.Replace(rfc3339, "%s", "r.deadline", 1),
		"{r.runCols}", cols("r", runCols),
		"{r.status}", statusExpr,
		"{s.runCols}", cols("s", runCols),
		"{runCols}", runCols,
		"{listRunCols}", strings.Replace(runCols, "payload,", "NULL::bytea,", 1),
		"{newRunCols}", newRunCols,
		"{e.effectCols}", cols("e", effectCols),
		"{up.effectCols}", cols("up", effectCols),
		"{old.effectCols}", cols("old", effectCols),
		"{cur.effectCols}", cols("cur", effectCols),
		"{effectCols}", effectCols,
		"{us4}", us("$4"), "{us5}", us("$5"), "{us6}", us("$6"), "{us7}", us("$7"), "{us8}", us("$8"),
		"{us9}", us("$9"), "{us10}", us("$10"),
		"{us:pickup}", us("pickup"), "{us:retention}", us("retention"), "{us:lease}", us("lease"),
	)
	fill := func(name string) string { return r2.Replace(r.Replace(statement(name))) }
	return queries{
		claim:              fill("claim"),
		claimBatch:         fill("claim_batch"),
		claimLatest:        fill("claim_latest"),
		acquire:            fill("acquire"),
		acquireQueued:      fill("acquire_queued"),
		acquireQueuedBatch: fill("acquire_queued_batch"),
		completeBatch:      fill("complete_batch"),
		renew:              fill("renew"),
		complete:           fill("complete"),
		fail:               fill("fail"),
		release:            fill("release"),
		rescue:             fill("rescue"),
		expedite:           fill("expedite"),
		lockedRun:          fill("locked_run"),
		get:                fill("get"),
		lockRun:            fill("lock_run"),
		getEffect:          fill("get_effect"),
		beginEffect:        fill("begin_effect"),
		completeEffect:     fill("complete_effect"),
		listRescue:         fill("list_rescue"),
		sweep:              fill("sweep"),
		getWithHistory:     fill("get_with_history"),
		lockForOperator:    fill("lock_for_operator"),
		writeRun:           fill("write_run"),
		addEvent:           fill("add_event"),
		listRuns:           fill("list_runs"),
		listEffects:        fill("list_effects"),
		listRunIDs:         fill("list_run_ids"),
		lockEffect:         fill("lock_effect"),
		writeEffect:        fill("write_effect"),
	}
}
