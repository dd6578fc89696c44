-- Renew: a fenced UPDATE ($2 run, $3 attempt, $4 attempt ID). $5: lease, $6: retention,
-- $7: progress (NULL: unchanged).

WITH up AS (
	UPDATE {runs} r SET deadline = {now} + {us5}, updated_at = {now}, progress = coalesce($7::bytea, r.progress),
		expire_at = greatest(r.expire_at, {now} + {us5} + {us6})
	WHERE r.run_id = $2 AND {r.status} = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING {r.runCols}
)
SELECT *, {now} FROM up
