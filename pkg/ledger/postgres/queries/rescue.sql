-- $2 run, $3 listed status, $4 listed attempt, $5 listed deadline, $6 pickup timeout,
-- $7 retention, $8 the lost-lease error.

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
SELECT *, {now} FROM up
