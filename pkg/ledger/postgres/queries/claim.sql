-- The ingress claim: the INSERT creates the run; on a conflict it does nothing (no row
-- version, no WAL record, no row lock: a duplicate is a read) and the UNION ALL branch
-- reads the existing row from the statement's snapshot. The one case this misses is a row
-- that a concurrent claim committed after the snapshot was taken (the INSERT waited for
-- it, then conflicted): the statement then returns no row, and Claim reads it with
-- claim_latest.sql, a second statement whose new snapshot sees it.

WITH ins AS (
	INSERT INTO {runs} AS r ({newRunCols}, ingress_claim)
	VALUES ($2, $3, $4, $5, $6, $7, $11, 'queued', 0, $8, {now} + {us9}, 0, '', {now}, {now}, {now} + {us9} + {us10},
		true)
	ON CONFLICT (run_id) DO NOTHING
	RETURNING true, {r.runCols}
)
SELECT * FROM ins
UNION ALL
SELECT false, {s.runCols} FROM {runs} s WHERE s.run_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)
