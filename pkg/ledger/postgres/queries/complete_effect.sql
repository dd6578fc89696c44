-- $2..$4 the fence, $5 effect key, $6 retention, $7 ref.

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
FROM (SELECT 1) one LEFT JOIN run ON true LEFT JOIN up ON true LEFT JOIN cur ON true
