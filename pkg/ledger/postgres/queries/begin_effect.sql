-- $2..$4 the fence, $5 effect key, $6 name, $7 retention.

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
FROM (SELECT 1) one LEFT JOIN run ON true LEFT JOIN up ON true LEFT JOIN old ON true
