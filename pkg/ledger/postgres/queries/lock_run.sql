-- Locks an existing run for the rest of a transaction (a sweep skips it).
SELECT 1 FROM {runs} WHERE run_id = $1 FOR UPDATE
