-- Writes every mutable column of an effect.
UPDATE {effects} SET status = $2, attempt = $3, ref = $4, done_at = $5, updated_at = $6,
	expire_at = $7
WHERE effect_key = $1
