-- The worker claim that decides every case (when acquire_queued.sql neither took nor
-- created the run): an upsert that takes a claimable run (queued and due, or running past
-- its deadline: {claimable}, a takeover being {takeover}) and otherwise returns the run as
-- it stands, with the claim's events. $2 run, $3 namespace, $4 job, $5 key, $6 schedule
-- time, $7 payload hash, $8 attempt ID, $9 lease, $10 retention (µs), $11 payload, $12
-- worker.

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
SELECT false, {s.runCols}, {now} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM up)
