-- Writes every mutable column of a run.
UPDATE {runs} SET status = $2, attempt = $3, attempt_id = $4, deadline = $5,
	not_before = $6, attempts_made = $7, last_error = $8, updated_at = $9, completed_at = $10,
	expire_at = $11, took_over = false
WHERE run_id = $1
