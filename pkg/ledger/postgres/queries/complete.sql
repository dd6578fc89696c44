-- Complete: a fenced UPDATE ($2 run, $3 attempt, $4 attempt ID). $5 error text, $6
-- retention, $7 result (NULL: none), $8 progress (NULL: unchanged).
--
-- A completion adds no row of run_events: completed is terminal, so its event is the
-- last of the history, and the row implies it (completed_event, migration 0010; Get
-- appends it).

WITH up AS (
	UPDATE {runs} r SET status = 'completed', attempts_made = r.attempts_made + 1,
		last_error = CASE WHEN $5::text <> '' THEN $5::text ELSE r.last_error END, result = $7::bytea,
		progress = coalesce($8::bytea, r.progress),
		deadline = NULL, not_before = NULL, completed_at = {now}, updated_at = {now},
		expire_at = {now} + {us6}, completed_event = true
	WHERE r.run_id = $2 AND {r.status} = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING {r.runCols}
)
SELECT *, {now} FROM up
