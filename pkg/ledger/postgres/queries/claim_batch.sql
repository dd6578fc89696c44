-- claim.sql for many runs (distinct IDs) in one statement, each row
-- with its own arguments as arrays: $1 the callers' Now (NULL for the database's clock),
-- $2 run IDs, $3 namespaces, $4 jobs, $5 keys, $6 schedule times, $7 payload hashes,
-- $8 attempt IDs, $9 pickup timeouts and $10 retentions (µs), $11 payloads. The runs it
-- creates come first, then those that existed; a run committed after the statement's
-- snapshot is in neither, and Claim reads it as claim.sql's caller does.

WITH i AS (
	SELECT t.*, coalesce(t.at, now()) AS now
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
		$7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bytea[])
		AS t (at, run_id, namespace, job, run_key, schedule_time, payload_hash, attempt_id, pickup, retention, payload)
), ins AS (
	INSERT INTO {runs} AS r ({newRunCols}, ingress_claim)
	SELECT run_id, namespace, job, run_key, schedule_time, payload_hash, payload, 'queued', 0, attempt_id,
		now + {us:pickup}, 0, '', now, now, now + {us:pickup} + {us:retention}, true
	FROM i
	ON CONFLICT (run_id) DO NOTHING
	RETURNING true, {r.runCols}
)
SELECT * FROM ins
UNION ALL
SELECT false, {s.runCols} FROM {runs} s
WHERE s.run_id = ANY($2::text[]) AND s.run_id NOT IN (SELECT run_id FROM ins)
