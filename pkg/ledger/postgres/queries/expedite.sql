-- $2 run, $3 the ingress claim's attempt ID, $4 retention.

WITH up AS (
	UPDATE {runs} r SET deadline = {now}, updated_at = {now}, expire_at = {now} + {us4}
	WHERE r.run_id = $2 AND {r.status} = 'queued' AND r.attempt = 0 AND r.attempt_id = $3
	RETURNING {r.runCols}
)
SELECT *, {now} FROM up
