-- Fail: a fenced UPDATE ($2 run, $3 attempt, $4 attempt ID) with its failed event. $5
-- error text, $6 retention, $7 result (NULL: none), $8 progress (NULL: unchanged), $9
-- the error text cut for the history (driver.ClipText). A failure adds its event, since
-- Retry can take the run on; the history's text is the run's last error: the failure's,
-- or the one before (at most 256 characters, so at most ledger.MaxEventText bytes).

WITH up AS (
	UPDATE {runs} r SET status = 'failed', attempts_made = r.attempts_made + 1,
		last_error = CASE WHEN $5::text <> '' THEN $5::text ELSE r.last_error END, result = $7::bytea,
		progress = coalesce($8::bytea, r.progress),
		deadline = NULL, not_before = NULL, completed_at = {now}, updated_at = {now},
		expire_at = {now} + {us6}
	WHERE r.run_id = $2 AND {r.status} = 'running' AND r.attempt = $3 AND r.attempt_id = $4
	RETURNING {r.runCols}
), ev AS (
	INSERT INTO {events} (run_id, at, kind, attempt, text) SELECT run_id, {now}, 'failed', attempt, CASE WHEN $9::text <> '' THEN $9::text ELSE left(last_error, 256) END FROM up
)
SELECT *, {now} FROM up
