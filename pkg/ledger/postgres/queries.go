package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
)

// The statements, one per transition. Each is a single statement (one round trip) run
// outside any explicit transaction, under READ COMMITTED. In every statement that takes
// the time, $1 is the caller's Now (NULL for the database's clock) and {now} stands for
// coalesce($1, now()); durations are passed in whole microseconds.
//
// Three patterns recur:
//
//   - Insert or read (Claim): INSERT … ON CONFLICT DO NOTHING, and a read of the existing
//     row from the statement's snapshot. A duplicate writes nothing and locks nothing; in
//     the rare race where the conflicting row was committed after the snapshot, the
//     statement returns no row and a second one reads it (see claimSQL).
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
//     updated row. When nothing was updated, a FOR SHARE read, which also follows the
//     update chain to the latest version and locks it, returns the record so that the
//     caller can tell an idempotent repeat from a fenced-out attempt. (If the UPDATE did
//     update the row, the locking read skips it as modified by this command; the NOT
//     EXISTS gate keeps it from running at all.)
//   - Effects lock their run FOR SHARE first, so that a takeover cannot slip between the
//     fence check and the effect write.
const (
	runCols = `run_id, namespace, job, run_key, schedule_time, payload_hash, payload, status, attempt,
	attempt_id, deadline, not_before, attempts_made, last_error, created_at, updated_at,
	completed_at, expire_at, history`
	// listCols are runCols without the payload and the history, which List leaves out.
	listCols = `run_id, namespace, job, run_key, schedule_time, payload_hash, NULL::bytea, status, attempt,
	attempt_id, deadline, not_before, attempts_made, last_error, created_at, updated_at,
	completed_at, expire_at, '[]'::jsonb`
	effectCols = `effect_key, run_id, name, status, attempt, ref, created_at, updated_at, done_at, expire_at`

	nowExpr = `coalesce($1::timestamptz, now())`
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

// event is a history event (ledger.Event) as a JSON object built in SQL; text and worker
// are SQL expressions, bounded by the caller (ledger.ClipText).
func event(kind ledger.EventKind, attempt, text, worker string) string {
	return `jsonb_build_object('at', {now}, 'kind', '` + string(kind) + `', 'attempt', ` + attempt +
		`, 'text', ` + text + `, 'worker', ` + worker + `)`
}

// appendHistory is the history h (a jsonb expression) with the events appended, cut to
// the latest ledger.MaxHistory, as ledger.AppendHistory does. Only a history that would
// grow past the bound pays for the cut (a subquery over its elements); the others are
// one concatenation.
func appendHistory(h string, events ...string) string {
	all := "(" + h + " || jsonb_build_array(" + strings.Join(events, ", ") + "))"
	max := strconv.Itoa(ledger.MaxHistory)
	return `(CASE WHEN jsonb_array_length(` + h + `) + ` + strconv.Itoa(len(events)) + ` <= ` + max + ` THEN ` + all +
		` ELSE (SELECT coalesce(jsonb_agg(e ORDER BY o), '[]'::jsonb) FROM jsonb_array_elements(` + all +
		`) WITH ORDINALITY t(e, o) WHERE o > jsonb_array_length(` + all + `) - ` + max + `) END)`
}

// The ingress claim: the INSERT creates the run; on a conflict it does nothing (no row
// version, no WAL record, no row lock: a duplicate is a read) and the UNION ALL branch
// reads the existing row from the statement's snapshot. The one case this misses is a row
// that a concurrent claim committed after the snapshot was taken (the INSERT waited for
// it, then conflicted): the statement then returns no row, and Claim reads it with
// claimLatestSQL, a second statement whose new snapshot sees it.
const claimSQL = `
WITH ins AS (
	INSERT INTO {runs} AS r (run_id, namespace, job, run_key, schedule_time, payload_hash, payload,
		status, attempt, attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at, history)
	VALUES ($2, $3, $4, $5, $6, $7, $11, 'queued', 0, $8, {now} + {us9}, 0, '', {now}, {now}, {now} + {us9} + {us10},
		jsonb_build_array({claimedEvent}))
	ON CONFLICT (run_id) DO NOTHING
	RETURNING true, {r.runCols}
)
SELECT * FROM ins
UNION ALL
SELECT false, {s.runCols} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`

// claimLatestSQL reads the run a claim conflicted with but could not see (above).
const claimLatestSQL = `SELECT false, {runCols} FROM {runs} WHERE run_id = $1`

// claimable: the existing row r may be taken by a worker claim at {now}.
// A run whose payload hash differs from the claim's is never claimable: the message is
// not the one the run was accepted with.
const claimable = `(r.payload_hash = EXCLUDED.payload_hash AND ((r.status = 'queued' AND (r.not_before IS NULL OR r.not_before <= {now}))
	OR (r.status = 'running' AND r.deadline < {now})))`

const takeover = `(r.payload_hash = EXCLUDED.payload_hash AND r.status = 'running' AND r.deadline < {now})`

const acquireSQL = `
WITH up AS (
	INSERT INTO {runs} AS r (run_id, namespace, job, run_key, schedule_time, payload_hash, payload,
		status, attempt, attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at, history)
	VALUES ($2, $3, $4, $5, $6, $7, $11, 'running', 1, $8, {now} + {us9}, 0, '', {now}, {now}, {now} + {us9} + {us10},
		jsonb_build_array({startedFirstEvent}))
	ON CONFLICT (run_id) DO UPDATE SET
		status        = CASE WHEN {claimable} THEN 'running' ELSE r.status END,
		attempt       = CASE WHEN {claimable} THEN r.attempt + 1 ELSE r.attempt END,
		attempt_id    = CASE WHEN {claimable} THEN EXCLUDED.attempt_id ELSE r.attempt_id END,
		deadline      = CASE WHEN {claimable} THEN EXCLUDED.deadline ELSE r.deadline END,
		not_before    = CASE WHEN {claimable} THEN NULL ELSE r.not_before END,
		attempts_made = CASE WHEN {takeover} THEN r.attempts_made + 1 ELSE r.attempts_made END,
		last_error    = CASE WHEN {takeover}
			THEN 'attempt ' || r.attempt || ' lost its lease at ' || {rfc3339:r.deadline}
			ELSE r.last_error END,
		updated_at    = CASE WHEN {claimable} THEN EXCLUDED.updated_at ELSE r.updated_at END,
		expire_at     = CASE WHEN {claimable} THEN EXCLUDED.expire_at ELSE r.expire_at END,
		history       = CASE WHEN {takeover} THEN {takeoverHistory}
			WHEN {claimable} THEN {startedHistory} ELSE r.history END
	WHERE {claimable}
		OR NOT EXISTS (SELECT 1 FROM {runs} v WHERE v.run_id = EXCLUDED.run_id AND v.ctid = r.ctid)
	RETURNING true, {r.runCols}
)
SELECT *, {now} FROM up
UNION ALL
SELECT false, {s.runCols}, {now} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM up)`

// fencedSQL is a fenced UPDATE of one run: set is its SET list, $2..$4 the fence.
func fencedSQL(set string) string {
	return `
WITH up AS (
	UPDATE {runs} r SET ` + set + `
	WHERE r.run_id = $2 AND r.status = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING true, {r.runCols}
)
SELECT *, {now} FROM up
UNION ALL
SELECT false, {s.runCols}, {now} FROM (SELECT * FROM {runs} WHERE run_id = $2 FOR SHARE) s
WHERE NOT EXISTS (SELECT 1 FROM up)`
}

// $5: lease, $6: retention.
var renewSQL = fencedSQL(`deadline = {now} + {us5}, updated_at = {now},
		expire_at = greatest(r.expire_at, {now} + {us5} + {us6})`)

// $5: error text, $6: retention, $7: the error text bounded for the history.
func finishSQL(status string) string {
	return fencedSQL(`status = '` + status + `', attempts_made = r.attempts_made + 1,
		last_error = CASE WHEN $5::text <> '' THEN $5::text ELSE r.last_error END,
		deadline = NULL, not_before = NULL, completed_at = {now}, updated_at = {now},
		expire_at = {now} + {us6}, history = ` +
		appendHistory("r.history", event(ledger.EventKind(status), "r.attempt", "$7::text", "''")))
}

// $5: error text, $6: retry after (0: none), $7: retry after + pickup timeout, $8: retention,
// $9: the error text bounded for the history.
var releaseSQL = fencedSQL(`status = 'queued', attempts_made = r.attempts_made + 1, last_error = $5,
		not_before = CASE WHEN $6::bigint > 0 THEN {now} + {us6} END,
		deadline = {now} + {us7}, updated_at = {now}, expire_at = {now} + {us7} + {us8}, history = ` +
	appendHistory("r.history", event(ledger.EventReleased, "r.attempt", "$9::text", "''")))

// $2 run, $3 listed status, $4 listed attempt, $5 listed deadline, $6 pickup timeout,
// $7 retention, $8 the lost-lease error.
const rescueSQL = `
WITH up AS (
	UPDATE {runs} r SET
		attempts_made = CASE WHEN r.status = 'running' THEN r.attempts_made + 1 ELSE r.attempts_made END,
		last_error    = CASE WHEN r.status = 'running' THEN $8 ELSE r.last_error END,
		attempt_id    = CASE WHEN r.status = 'running' THEN '' ELSE r.attempt_id END,
		status = 'queued', not_before = NULL, deadline = {now} + {us6}, updated_at = {now},
		expire_at = {now} + {us6} + {us7},
		history = CASE WHEN r.status = 'running' THEN {rescueLostHistory} ELSE {rescuedHistory} END
	WHERE r.run_id = $2 AND r.status = $3 AND r.attempt = $4 AND r.deadline = $5
		AND r.status IN ('queued', 'running') AND r.deadline < {now}
	RETURNING true, {r.runCols}
)
SELECT *, {now} FROM up
UNION ALL
SELECT false, {s.runCols}, {now} FROM (SELECT * FROM {runs} WHERE run_id = $2 FOR SHARE) s
WHERE NOT EXISTS (SELECT 1 FROM up)`

// $2 run, $3 the ingress claim's attempt ID, $4 retention.
const expediteSQL = `
WITH up AS (
	UPDATE {runs} r SET deadline = {now}, updated_at = {now}, expire_at = {now} + {us4}
	WHERE r.run_id = $2 AND r.status = 'queued' AND r.attempt = 0 AND r.attempt_id = $3
	RETURNING true, {r.runCols}
)
SELECT *, {now} FROM up
UNION ALL
SELECT false, {s.runCols}, {now} FROM (SELECT * FROM {runs} WHERE run_id = $2 FOR SHARE) s
WHERE NOT EXISTS (SELECT 1 FROM up)`

const getSQL = `SELECT {runCols} FROM {runs} WHERE run_id = $1`

// lockRunSQL locks an existing run for the rest of a transaction (a sweep skips it).
const lockRunSQL = `SELECT 1 FROM {runs} WHERE run_id = $1 FOR UPDATE`

const getEffectSQL = `SELECT {effectCols} FROM {effects} WHERE effect_key = $1`

// $2..$4 the fence, $5 effect key, $6 name, $7 retention.
const beginEffectSQL = `
WITH run AS MATERIALIZED (
	SELECT status, attempt, attempt_id FROM {runs} WHERE run_id = $2 FOR SHARE
), old AS (
	SELECT {effectCols} FROM {effects} WHERE effect_key = $5
), up AS (
	INSERT INTO {effects} AS e (effect_key, run_id, name, status, attempt, created_at, updated_at, expire_at)
	SELECT $5::text, $2::text, $6::text, 'pending', $3::bigint, {now}, {now}, {now} + {us7}
	FROM run WHERE run.status = 'running' AND run.attempt = $3::bigint AND run.attempt_id = $4::text
	ON CONFLICT (effect_key) DO UPDATE SET
		status     = CASE WHEN e.status = 'done' THEN e.status ELSE 'pending' END,
		attempt    = CASE WHEN e.status = 'done' THEN e.attempt ELSE EXCLUDED.attempt END,
		updated_at = CASE WHEN e.status = 'done' THEN e.updated_at ELSE EXCLUDED.updated_at END,
		expire_at  = CASE WHEN e.status = 'done' THEN e.expire_at ELSE EXCLUDED.expire_at END
	WHERE e.status <> 'done'
		OR NOT EXISTS (SELECT 1 FROM {effects} v WHERE v.effect_key = EXCLUDED.effect_key AND v.ctid = e.ctid)
	RETURNING {e.effectCols}
)
SELECT run.status, run.attempt, run.attempt_id, {up.effectCols}, {old.effectCols}, {now}
FROM (SELECT 1) one LEFT JOIN run ON true LEFT JOIN up ON true LEFT JOIN old ON true`

// $2..$4 the fence, $5 effect key, $6 retention, $7 ref.
const completeEffectSQL = `
WITH run AS MATERIALIZED (
	SELECT status, attempt, attempt_id FROM {runs} WHERE run_id = $2 FOR SHARE
), up AS (
	UPDATE {effects} e SET status = 'done', ref = $7::text, done_at = {now}, updated_at = {now}, expire_at = {now} + {us6}
	FROM run
	WHERE e.effect_key = $5 AND e.status = 'pending' AND e.attempt = $3
		AND run.status = 'running' AND run.attempt = $3 AND run.attempt_id = $4
	RETURNING {e.effectCols}
), cur AS (
	SELECT {effectCols} FROM {effects} WHERE effect_key = $5 FOR SHARE
)
SELECT run.status, run.attempt, run.attempt_id, {up.effectCols}, {cur.effectCols}, {now}
FROM (SELECT 1) one LEFT JOIN run ON true LEFT JOIN up ON true LEFT JOIN cur ON true`

// $2 limit.
const listRescueSQL = `
SELECT {runCols} FROM {runs}
WHERE status IN ('queued', 'running') AND deadline < {now}
ORDER BY deadline
LIMIT $2`

// $2 limit. Runs first, then effects whose run is gone (deleted by this statement or
// earlier), at most $2 records in all: a live run's effects are kept whatever their own
// expire_at says, or a later attempt would redo them. Rows that other statements hold
// locked are left for the next sweep.
const sweepSQL = `
WITH r AS (
	DELETE FROM {runs}
	WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM {runs} WHERE expire_at < {now} ORDER BY expire_at LIMIT $2
		FOR UPDATE SKIP LOCKED))
	AND expire_at < {now}
	RETURNING run_id
), e AS (
	DELETE FROM {effects}
	WHERE ctid = ANY(ARRAY(
		SELECT x.ctid FROM {effects} x WHERE x.expire_at < {now}
			AND (x.run_id IN (SELECT run_id FROM r)
				OR NOT EXISTS (SELECT 1 FROM {runs} v WHERE v.run_id = x.run_id))
		ORDER BY x.expire_at
		LIMIT greatest($2 - (SELECT count(*) FROM r), 0)
		FOR UPDATE SKIP LOCKED))
	AND expire_at < {now}
	RETURNING 1
)
SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM e)`

// lockForOperatorSQL reads and locks a run for an operator's action, with the time.
const lockForOperatorSQL = `SELECT {runCols}, {now} FROM {runs} WHERE run_id = $2 FOR UPDATE`

// operatorSQL writes what an operator's action (ledger.ApplyRetry, …) made of the run
// lockForOperatorSQL locked.
const operatorSQL = `UPDATE {runs} SET status = $2, attempts_made = $3, attempt_id = $4, deadline = $5,
	not_before = $6, last_error = $7, completed_at = $8, updated_at = $9, expire_at = $10, history = $11
	WHERE run_id = $1`

const listEffectsSQL = `SELECT {effectCols} FROM {effects} WHERE run_id = $1 ORDER BY name LIMIT $2`

// queries are the statements with the schema's table names filled in.
type queries struct {
	claim, claimLatest, acquire, renew, complete, fail, release, rescue, expedite string
	get, lockRun, getEffect, beginEffect, completeEffect, listRescue, sweep       string
	lockForOperator, operator, listEffects                                        string
	// runs is the runs table's qualified name, for List's statements.
	runs string
}

func buildQueries(schema string) queries {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	lost := `'attempt ' || r.attempt || ' lost its lease at ' || {rfc3339:r.deadline}`
	started := event(ledger.EventStarted, "r.attempt + 1", "''", "$12::text")
	r := strings.NewReplacer(
		"{claimable}", claimable,
		"{takeover}", takeover,
		"{claimedEvent}", event(ledger.EventClaimed, "0", "''", "''"),
		"{startedFirstEvent}", event(ledger.EventStarted, "1", "''", "$12::text"),
		"{takeoverHistory}", appendHistory("r.history", event(ledger.EventLeaseLost, "r.attempt", lost, "''"), started),
		"{startedHistory}", appendHistory("r.history", started),
		"{rescueLostHistory}", appendHistory("r.history", event(ledger.EventLeaseLost, "r.attempt", "$8::text", "''")),
		"{rescuedHistory}", appendHistory("r.history", event(ledger.EventRescued, "r.attempt", "''", "''")),
	)
	r2 := strings.NewReplacer(
		"{runs}", prefix+"runs",
		"{effects}", prefix+"effects",
		"{now}", nowExpr,
		"{rfc3339:r.deadline}", strings.Replace(rfc3339, "%s", "r.deadline", 1),
		"{r.runCols}", cols("r", runCols),
		"{s.runCols}", cols("s", runCols),
		"{runCols}", runCols,
		"{e.effectCols}", cols("e", effectCols),
		"{up.effectCols}", cols("up", effectCols),
		"{old.effectCols}", cols("old", effectCols),
		"{cur.effectCols}", cols("cur", effectCols),
		"{effectCols}", effectCols,
		"{us4}", us("$4"), "{us5}", us("$5"), "{us6}", us("$6"), "{us7}", us("$7"), "{us8}", us("$8"),
		"{us9}", us("$9"), "{us10}", us("$10"),
	)
	fill := func(s string) string { return r2.Replace(r.Replace(s)) }
	return queries{
		claim:          fill(claimSQL),
		claimLatest:    fill(claimLatestSQL),
		acquire:        fill(acquireSQL),
		renew:          fill(renewSQL),
		complete:       fill(finishSQL("completed")),
		fail:           fill(finishSQL("failed")),
		release:        fill(releaseSQL),
		rescue:         fill(rescueSQL),
		expedite:       fill(expediteSQL),
		get:            fill(getSQL),
		lockRun:        fill(lockRunSQL),
		getEffect:      fill(getEffectSQL),
		beginEffect:    fill(beginEffectSQL),
		completeEffect: fill(completeEffectSQL),
		listRescue:     fill(listRescueSQL),
		sweep:          fill(sweepSQL),

		lockForOperator: fill(lockForOperatorSQL),
		operator:        fill(operatorSQL),
		listEffects:     fill(listEffectsSQL),
		runs:            prefix + "runs",
	}
}
