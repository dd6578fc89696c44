-- Release: a fenced UPDATE ($2 run, $3 attempt, $4 attempt ID) with its released event.
-- $5: error text, $6: retry after (0: none), $7: retry after + pickup timeout, $8: retention,
-- $9: progress (NULL: unchanged), $10: the error text cut for the history.

WITH up AS (
	UPDATE {runs} r SET status = 'queued', attempts_made = r.attempts_made + 1, last_error = $5,
		progress = coalesce($9::bytea, r.progress),
		not_before = CASE WHEN $6::bigint > 0 THEN {now} + {us6} END,
		deadline = {now} + {us7}, updated_at = {now}, expire_at = {now} + {us7} + {us8}
	WHERE r.run_id = $2 AND {r.status} = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING {r.runCols}
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, text) SELECT run_id, {now}, 'released', attempt, $10::text FROM up
)
SELECT *, {now} FROM up
