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
//     updated row. When nothing was updated, a second statement (lockedRunSQL) reads the
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
//   - The listing's indexes end with the run ID in the C collation (migration 00009),
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

// The ingress claim: the INSERT creates the run; on a conflict it does nothing (no row
// version, no WAL record, no row lock: a duplicate is a read) and the UNION ALL branch
// reads the existing row from the statement's snapshot. The one case this misses is a row
// that a concurrent claim committed after the snapshot was taken (the INSERT waited for
// it, then conflicted): the statement then returns no row, and Claim reads it with
// claimLatestSQL, a second statement whose new snapshot sees it.
const claimSQL = `
WITH ins AS (
	INSERT INTO {runs} AS r ({newRunCols}, ingress_claim)
	VALUES ($2, $3, $4, $5, $6, $7, $11, 'queued', 0, $8, {now} + {us9}, 0, '', {now}, {now}, {now} + {us9} + {us10},
		true)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING true, {r.runCols}
)
SELECT * FROM ins
UNION ALL
SELECT false, {s.runCols} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`

// claimBatchSQL is claimSQL for many runs (distinct IDs) in one statement, each row
// with its own arguments as arrays: $1 the callers' Now (NULL for the database's clock),
// $2 run IDs, $3 namespaces, $4 jobs, $5 keys, $6 schedule times, $7 payload hashes,
// $8 attempt IDs, $9 pickup timeouts and $10 retentions (µs), $11 payloads. The runs it
// creates come first, then those that existed; a run committed after the statement's
// snapshot is in neither, and Claim reads it as claimSQL's caller does.
const claimBatchSQL = `
WITH i AS (
	SELECT t.*, coalesce(t.at, now()) AS now
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
		$7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bytea[])
		AS t (at, run_id, namespace, job, run_key, schedule_time, payload_hash, attempt_id, pickup, retention, payload)
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols}, ingress_claim)
	SELECT run_id, namespace, job, run_key, schedule_time, payload_hash, payload, 'queued', 0, attempt_id,
		now + {us:pickup}, 0, '', now, now, now + {us:pickup} + {us:retention}, true
	FROM i
	ON CONFLICT (run_id) DO NOTHING
	RETURNING true, {r.runCols}
)
SELECT * FROM ins
UNION ALL
SELECT false, {s.runCols} FROM {runs} s
WHERE s.run_id = ANY($2::text[]) AND s.run_id NOT IN (SELECT run_id FROM ins)`

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
	INSERT INTO {runs} AS r ({newRunCols})
	VALUES ($2, $3, $4, $5, $6, $7, $11, 'running', 1, $8, {now} + {us9}, 0, '', {now}, {now}, {now} + {us9} + {us10})
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
		took_over     = CASE WHEN {claimable} THEN {takeover} ELSE r.took_over END
	WHERE {claimable}
		OR NOT EXISTS (SELECT 1 FROM {runs} v WHERE v.run_id = EXCLUDED.run_id AND v.ctid = r.ctid)
	RETURNING {r.runCols}, r.took_over
), ev AS (
	-- The claim's events: started (the worker is $12), after lease_lost on a takeover.
	-- A row returned but not claimed (the no-op update above) was written earlier.
	INSERT INTO {events} (run_id, at, kind, attempt, worker, text)
	SELECT up.run_id, {now}, k.kind, k.attempt, k.worker, k.text
	FROM up CROSS JOIN LATERAL (VALUES
		(0, 'lease_lost', up.attempt - 1, '', up.last_error),
		(1, 'started', up.attempt, $12::text, '')) AS k (ord, kind, attempt, worker, text)
	WHERE up.status = 'running' AND up.attempt_id = $8 AND up.updated_at = {now} AND (k.ord = 1 OR up.took_over)
	ORDER BY k.ord
)
SELECT true, {up.runCols}, {now} FROM up
UNION ALL
SELECT false, {s.runCols}, {now} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM up)`

// acquireQueuedSQL is the worker claim's two usual cases in one statement: a queued run
// that exists and may be taken now (the ingress created it), which a conditional UPDATE
// takes (acquireSQL's claimable arm for a queued run), and a run absent from the
// statement's snapshot (a message published without the ingress), which an INSERT …
// ON CONFLICT DO NOTHING creates running, unless $13 says not to (the claim must find it,
// or its payload is too large to send with every claim: createArgs); each with its
// started event. Under READ COMMITTED the UPDATE's WHERE is checked again on the latest
// version of a row updated concurrently, so a run another claim took in between is not
// taken twice, and the INSERT does nothing on a run committed after the snapshot. The
// INSERT is not tried when the UPDATE took the run (it would only find the conflict, at
// the price of a speculative insertion's probe and its RETURNING). When
// neither writes (held, finished, a takeover, a payload mismatch, a run not to be created
// here, or that race), Acquire runs acquireSQL, which decides every case. On queued runs it
// costs less than the upsert (1.3–1.45× its rate at 32 goroutines, measured side by side).
// $2 run, $3 payload hash, $4 attempt ID, $5 lease, $6 retention, $7 worker, $8
// namespace, $9 job, $10 key, $11 schedule time, $12 payload, $13 not to be created here.
const acquireQueuedSQL = `
WITH up AS (
	UPDATE {runs} r SET status = 'running', attempt = r.attempt + 1, attempt_id = $4, deadline = {now} + {us5},
		not_before = NULL, updated_at = {now}, expire_at = {now} + {us5} + {us6}, took_over = false
	WHERE r.run_id = $2 AND r.payload_hash = $3 AND {r.status} = 'queued' AND (r.not_before IS NULL OR r.not_before <= {now})
	RETURNING {r.runCols}
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols})
	SELECT $2::text, $8::text, $9::text, $10::text, $11::timestamptz, $3::text, $12::bytea,
		'running', 1, $4::text, {now} + {us5}, 0, '', {now}, {now}, {now} + {us5} + {us6}
	WHERE NOT $13::boolean AND NOT EXISTS (SELECT 1 FROM up)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING {r.runCols}
), taken AS (
	SELECT * FROM up UNION ALL SELECT * FROM ins
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, worker) SELECT run_id, {now}, 'started', attempt, $7::text FROM taken
)
SELECT true, *, {now} FROM taken`

// acquireQueuedBatchSQL is acquireQueuedSQL for many runs (distinct IDs) in one
// statement: $1 the callers' Now, $2 run IDs, $3 payload hashes, $4 attempt IDs, $5
// leases and $6 retentions (µs), $7 workers, $8 namespaces, $9 jobs, $10 keys, $11
// schedule times, $12 payloads, $13 not to be created here. It returns the runs it took
// or created; Acquire decides the others one by one. The INSERT leaves out the runs the
// UPDATE took, and does nothing on any other run that exists.
const acquireQueuedBatchSQL = `
WITH i AS (
	SELECT t.*, coalesce(t.at, now()) AS now
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[],
		$8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::bytea[], $13::boolean[])
		AS t (at, run_id, payload_hash, attempt_id, lease, retention, worker,
			namespace, job, run_key, schedule_time, payload, no_create)
), up AS (
	UPDATE {runs} r SET status = 'running', attempt = r.attempt + 1, attempt_id = i.attempt_id,
		deadline = i.now + {us:lease}, not_before = NULL, updated_at = i.now,
		expire_at = i.now + {us:lease} + {us:retention}, took_over = false
	FROM i
	WHERE r.run_id = i.run_id AND r.run_id = ANY($2::text[]) AND r.payload_hash = i.payload_hash AND {r.status} = 'queued'
		AND (r.not_before IS NULL OR r.not_before <= i.now)
	RETURNING {r.runCols}
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols})
	SELECT i.run_id, i.namespace, i.job, i.run_key, i.schedule_time, i.payload_hash, i.payload,
		'running', 1, i.attempt_id, i.now + {us:lease}, 0, '', i.now, i.now, i.now + {us:lease} + {us:retention}
	FROM i
	WHERE NOT i.no_create AND NOT EXISTS (SELECT 1 FROM up WHERE up.run_id = i.run_id)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING {r.runCols}
), taken AS (
	SELECT * FROM up UNION ALL SELECT * FROM ins
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, worker)
	SELECT taken.run_id, i.now, 'started', taken.attempt, i.worker FROM taken JOIN i ON i.run_id = taken.run_id
)
SELECT {runCols} FROM taken`

// completeBatchSQL is the completing fencedSQL for many runs (distinct IDs) in one
// statement: $1 the callers' Now, $2 run IDs, $3 attempts, $4 attempt IDs, $5 retentions
// (µs), $6 results, $7 progress (NULL: unchanged). It returns the runs it completed;
// Complete decides the others one by one. Like finishSQL("completed"), it adds no row of
// run_events: the completion's event is the row (completed_event, migration 00010).
const completeBatchSQL = `
WITH i AS (
	SELECT t.*, coalesce(t.at, now()) AS now
	FROM unnest($1::timestamptz[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bytea[], $7::bytea[])
		AS t (at, run_id, attempt, attempt_id, retention, result, progress)
), up AS (
	UPDATE {runs} r SET status = 'completed', attempts_made = r.attempts_made + 1, result = i.result,
		progress = coalesce(i.progress, r.progress),
		deadline = NULL, not_before = NULL, completed_at = i.now, updated_at = i.now,
		expire_at = i.now + {us:retention}, completed_event = true
	FROM i
	WHERE r.run_id = i.run_id AND r.run_id = ANY($2::text[]) AND {r.status} = 'running' AND r.attempt = i.attempt AND r.attempt_id = i.attempt_id
	RETURNING {r.runCols}
)
SELECT {up.runCols} FROM up`

// fencedSQL is a fenced UPDATE of one run: set is its SET list, $2..$4 the fence; event,
// when not empty, is the kind of the event it adds to the run's history, with the text
// textSQL.
func fencedSQL(set, event, textSQL string) string {
	ev := ""
	if event != "" {
		ev = `, ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, text) SELECT run_id, {now}, '` + event + `', attempt, ` + textSQL + ` FROM up
)`
	}
	return `
WITH up AS (
	UPDATE {runs} r SET ` + set + `
	WHERE r.run_id = $2 AND {r.status} = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING {r.runCols}
)` + ev + `
SELECT *, {now} FROM up`
}

// lockedRunSQL reads a run that a fenced UPDATE did not change, FOR SHARE (the latest
// version, once a concurrent writer has committed), with the time: $1 the caller's Now,
// $2 the run.
const lockedRunSQL = `SELECT {runCols}, {now} FROM {runs} WHERE run_id = $2 FOR SHARE`

// $5: lease, $6: retention, $7: progress (NULL: unchanged).
var renewSQL = fencedSQL(`deadline = {now} + {us5}, updated_at = {now}, progress = coalesce($7::bytea, r.progress),
		expire_at = greatest(r.expire_at, {now} + {us5} + {us6})`, "", "")

// $5: error text, $6: retention, $7: result (NULL: none), $8: progress (NULL: unchanged),
// $9 (failed only): the error text cut for the history (driver.ClipText).
//
// A completion adds no row of run_events: completed is terminal, so its event is the
// last of the history, and the row implies it (completed_event, migration 00010; Get
// appends it). A failure adds its event, since Retry can take the run on.
func finishSQL(status string) string {
	set := `status = '` + status + `', attempts_made = r.attempts_made + 1,
		last_error = CASE WHEN $5::text <> '' THEN $5::text ELSE r.last_error END, result = $7::bytea,
		progress = coalesce($8::bytea, r.progress),
		deadline = NULL, not_before = NULL, completed_at = {now}, updated_at = {now},
		expire_at = {now} + {us6}`
	if status == "completed" {
		return fencedSQL(set+`, completed_event = true`, "", "")
	}
	// The history's text is the run's last error: the failure's, or the one before (at
	// most 256 characters, so at most ledger.MaxEventText bytes).
	return fencedSQL(set, status, `CASE WHEN $9::text <> '' THEN $9::text ELSE left(last_error, 256) END`)
}

// $5: error text, $6: retry after (0: none), $7: retry after + pickup timeout, $8: retention,
// $9: progress (NULL: unchanged), $10: the error text cut for the history.
var releaseSQL = fencedSQL(`status = 'queued', attempts_made = r.attempts_made + 1, last_error = $5,
		progress = coalesce($9::bytea, r.progress),
		not_before = CASE WHEN $6::bigint > 0 THEN {now} + {us6} END,
		deadline = {now} + {us7}, updated_at = {now}, expire_at = {now} + {us7} + {us8}`, "released", "$10::text")

// $2 run, $3 listed status, $4 listed attempt, $5 listed deadline, $6 pickup timeout,
// $7 retention, $8 the lost-lease error.
const rescueSQL = `
WITH up AS (
	UPDATE {runs} r SET
		attempts_made = CASE WHEN r.status = 'running' THEN r.attempts_made + 1 ELSE r.attempts_made END,
		last_error    = CASE WHEN r.status = 'running' THEN $8 ELSE r.last_error END,
		attempt_id    = CASE WHEN r.status = 'running' THEN '' ELSE r.attempt_id END,
		status = 'queued', not_before = NULL, deadline = {now} + {us6}, updated_at = {now},
		expire_at = {now} + {us6} + {us7}
	WHERE r.run_id = $2 AND {r.status} = $3 AND r.attempt = $4 AND r.deadline = $5
		AND {r.status} IN ('queued', 'running') AND r.deadline < {now}
	RETURNING {r.runCols}
), ev AS (
	-- A running run's attempt lost its lease; a queued one was rescued.
	INSERT INTO {events} (run_id, at, kind, attempt, text)
	SELECT run_id, {now},
		CASE WHEN $3 = 'running' THEN 'lease_lost' ELSE 'rescued' END,
		CASE WHEN $3 = 'running' THEN $4 ELSE attempt END,
		CASE WHEN $3 = 'running' THEN last_error ELSE '' END
	FROM up
)
SELECT *, {now} FROM up`

// $2 run, $3 the ingress claim's attempt ID, $4 retention.
const expediteSQL = `
WITH up AS (
	UPDATE {runs} r SET deadline = {now}, updated_at = {now}, expire_at = {now} + {us4}
	WHERE r.run_id = $2 AND {r.status} = 'queued' AND r.attempt = 0 AND r.attempt_id = $3
	RETURNING {r.runCols}
)
SELECT *, {now} FROM up`

const getSQL = `SELECT {runCols} FROM {runs} WHERE run_id = $1`

// getWithHistorySQL reads a run, whether the ingress claim created it (its claimed
// event is the row: Get puts it first), whether its completion's event is the row (Get
// puts it last), and the latest {maxHistory} stored events of its history, oldest
// first, as a JSON array of ledger.Event, in one statement.
const getWithHistorySQL = `SELECT {runCols}, ingress_claim, completed_event, (
	SELECT coalesce(json_agg(json_build_object('at', e.at, 'kind', e.kind, 'attempt', e.attempt,
		'worker', e.worker, 'actor', e.actor, 'text', e.text) ORDER BY e.seq), '[]')
	FROM (SELECT * FROM {events} WHERE run_id = $1 ORDER BY seq DESC LIMIT {maxHistory}) e
) FROM {runs} WHERE run_id = $1`

// lockForOperatorSQL reads and locks a run, with the database's time, for an operator's
// transition (decided in Go by the driver's rules, then written by writeRunSQL).
const lockForOperatorSQL = `SELECT {runCols}, {now} FROM {runs} WHERE run_id = $2 FOR UPDATE`

// writeRunSQL writes every mutable column of a run.
const writeRunSQL = `UPDATE {runs} SET status = $2, attempt = $3, attempt_id = $4, deadline = $5,
	not_before = $6, attempts_made = $7, last_error = $8, updated_at = $9, completed_at = $10,
	expire_at = $11, took_over = false
WHERE run_id = $1`

// lockEffectSQL reads and locks an effect for an operator's transition (after its run:
// lockForOperatorSQL).
const lockEffectSQL = `SELECT {effectCols} FROM {effects} WHERE effect_key = $1 FOR UPDATE`

// writeEffectSQL writes every mutable column of an effect.
const writeEffectSQL = `UPDATE {effects} SET status = $2, attempt = $3, ref = $4, done_at = $5, updated_at = $6,
	expire_at = $7
WHERE effect_key = $1`

// listRunsSQL is the start of List's statement: every column of a run but its payload.
// List adds the WHERE, ORDER BY and LIMIT its filters need.
var listRunsSQL = `SELECT ` + strings.Replace(runCols, "payload,", "NULL::bytea,", 1) + ` FROM {runs}`

// $1 run, $2 limit.
const listEffectsSQL = `SELECT {effectCols} FROM {effects} WHERE run_id = $1 ORDER BY name LIMIT $2`

// listRunIDsSQL is ListRunIDs's statement: a range of the primary key, in the column's
// own collation (the PK's), which holds the IDs (TestListRunIDsReadsThePrimaryKey).
const listRunIDsSQL = `SELECT run_id FROM {runs} WHERE run_id >= $1 AND run_id < $2 ORDER BY run_id LIMIT $3`

// addEventSQL adds one event to a run's history.
const addEventSQL = `INSERT INTO {events} (run_id, at, kind, attempt, worker, actor, text)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

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

// $2 limit. Runs first, with their histories, then effects whose run is gone (deleted
// by this statement or earlier), at most $2 records in all (events not counted): a live run's effects are kept whatever their own
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
), ev AS (
	-- The deleted runs' histories (no foreign key cascades: see migration 00006).
	DELETE FROM {events} WHERE run_id IN (SELECT run_id FROM r)
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
	fill := func(s string) string { return r2.Replace(r.Replace(s)) }
	return queries{
		claim:              fill(claimSQL),
		claimBatch:         fill(claimBatchSQL),
		claimLatest:        fill(claimLatestSQL),
		acquire:            fill(acquireSQL),
		acquireQueued:      fill(acquireQueuedSQL),
		acquireQueuedBatch: fill(acquireQueuedBatchSQL),
		completeBatch:      fill(completeBatchSQL),
		renew:              fill(renewSQL),
		complete:           fill(finishSQL("completed")),
		fail:               fill(finishSQL("failed")),
		release:            fill(releaseSQL),
		rescue:             fill(rescueSQL),
		expedite:           fill(expediteSQL),
		lockedRun:          fill(lockedRunSQL),
		get:                fill(getSQL),
		lockRun:            fill(lockRunSQL),
		getEffect:          fill(getEffectSQL),
		beginEffect:        fill(beginEffectSQL),
		completeEffect:     fill(completeEffectSQL),
		listRescue:         fill(listRescueSQL),
		sweep:              fill(sweepSQL),
		getWithHistory:     fill(getWithHistorySQL),
		lockForOperator:    fill(lockForOperatorSQL),
		writeRun:           fill(writeRunSQL),
		addEvent:           fill(addEventSQL),
		listRuns:           fill(listRunsSQL),
		listEffects:        fill(listEffectsSQL),
		listRunIDs:         fill(listRunIDsSQL),
		lockEffect:         fill(lockEffectSQL),
		writeEffect:        fill(writeEffectSQL),
	}
}
