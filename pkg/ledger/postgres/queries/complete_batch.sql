-- complete.sql for many runs (distinct IDs) in one statement: $1 the callers' Now, $2 run
-- IDs, $3 attempts, $4 attempt IDs, $5 retentions (µs), $6 results, $7 progress (NULL:
-- unchanged). It returns the runs it completed; Complete decides the others one by one.
-- Like complete.sql, it adds no row of run_events: the completion's event is the row
-- (completed_event, migration 0010).

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
SELECT {up.runCols} FROM up
