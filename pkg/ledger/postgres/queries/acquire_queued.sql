-- The worker claim's two usual cases in one statement: a queued run
-- that exists and may be taken now (the ingress created it), which a conditional UPDATE
-- takes (acquire.sql's claimable arm for a queued run), and a run absent from the
-- statement's snapshot (a message published without the ingress), which an INSERT …
-- ON CONFLICT DO NOTHING creates running, unless $13 says not to (the claim must find it,
-- or its payload is too large to send with every claim: createArgs); each with its
-- started event. Under READ COMMITTED the UPDATE's WHERE is checked again on the latest
-- version of a row updated concurrently, so a run another claim took in between is not
-- taken twice, and the INSERT does nothing on a run committed after the snapshot. The
-- INSERT is not tried when the UPDATE took the run (it would only find the conflict, at
-- the price of a speculative insertion's probe and its RETURNING). When
-- neither writes (held, finished, a takeover, a payload mismatch, a run not to be created
-- here, or that race), Acquire runs acquire.sql, which decides every case. On queued runs it
-- costs less than the upsert (1.3–1.45× its rate at 32 goroutines, measured side by side).
-- $2 run, $3 payload hash, $4 attempt ID, $5 lease, $6 retention, $7 worker, $8
-- namespace, $9 job, $10 key, $11 schedule time, $12 payload, $13 not to be created here.

WITH up AS (
	UPDATE {runs} r SET status = 'running', attempt = r.attempt + 1, attempt_id = $4, deadline = {now} + {us5},
		not_before = NULL, updated_at = {now}, expire_at = {now} + {us5} + {us6}, took_over = false
	WHERE r.run_id = $2 AND r.payload_hash = $3 AND {r.status} = 'queued' AND (r.not_before IS NULL OR r.not_before <= {now})
	RETURNING {r.runCols}
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols})
	SELECT $2::text, $8::text, $9::text, $10::text, $11::timestamptz, $3::text, $12::bytea,
		'running', 1, $4::text, {now} + {us5}, 0, '', {now}, {now}, {now} + {us5} + {us6}
	WHERE NOT $13::boolean AND NOT EXISTS (SELECT 1 FROM up)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING {r.runCols}
), taken AS (
	SELECT * FROM up UNION ALL SELECT * FROM ins
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, worker) SELECT run_id, {now}, 'started', attempt, $7::text FROM taken
)
SELECT true, *, {now} FROM taken
