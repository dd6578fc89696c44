-- $2 limit. Runs first, with their histories, then effects whose run is gone (deleted
-- by this statement or earlier), at most $2 records in all (events not counted): a live run's effects are kept whatever their own
-- expire_at says, or a later attempt would redo them. Rows that other statements hold
-- locked are left for the next sweep.

WITH r AS (
	DELETE FROM {runs}
	WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM {runs} WHERE expire_at < {now} ORDER BY expire_at LIMIT $2
		FOR UPDATE SKIP LOCKED))
	AND expire_at < {now}
	RETURNING run_id
), ev AS (
	-- The deleted runs' histories (no foreign key cascades: see migration 0006).
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
SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM e)
