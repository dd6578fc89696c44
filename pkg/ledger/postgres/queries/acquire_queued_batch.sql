-- acquire_queued.sql for many runs (distinct IDs) in one statement: $1 the callers' Now,
-- $2 run IDs, $3 payload hashes, $4 attempt IDs, $5 leases and $6 retentions (µs), $7
-- workers, $8 namespaces, $9 jobs, $10 keys, $11 schedule times, $12 payloads, $13 not
-- to be created here. It returns the runs it took or created; Acquire decides the others one by one. The INSERT leaves out the runs the
-- UPDATE took, and does nothing on any other run that exists.

WITH i AS (
	SELECT t.*, coalesce(t.at, now()) AS now
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[],
		$8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::bytea[], $13::boolean[])
		AS t (at, run_id, payload_hash, attempt_id, lease, retention, worker,
			namespace, job, run_key, schedule_time, payload, no_create)
), up AS (
	UPDATE {runs} r SET status = 'running', attempt = r.attempt + 1, attempt_id = i.attempt_id,
		deadline = i.now + {us:lease}, not_before = NULL, updated_at = i.now,
		expire_at = i.now + {us:lease} + {us:retention}, took_over = false
	FROM i
	WHERE r.run_id = i.run_id AND r.run_id = ANY($2::text[]) AND r.payload_hash = i.payload_hash AND {r.status} = 'queued'
		AND (r.not_before IS NULL OR r.not_before <= i.now)
	RETURNING {r.runCols}
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols})
	SELECT i.run_id, i.namespace, i.job, i.run_key, i.schedule_time, i.payload_hash, i.payload,
		'running', 1, i.attempt_id, i.now + {us:lease}, 0, '', i.now, i.now, i.now + {us:lease} + {us:retention}
	FROM i
	WHERE NOT i.no_create AND NOT EXISTS (SELECT 1 FROM up WHERE up.run_id = i.run_id)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING {r.runCols}
), taken AS (
	SELECT * FROM up UNION ALL SELECT * FROM ins
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, worker)
	SELECT taken.run_id, i.now, 'started', taken.attempt, i.worker FROM taken JOIN i ON i.run_id = taken.run_id
)
SELECT {runCols} FROM taken
