-- Reads the run a claim conflicted with but could not see (claim.sql).
SELECT false, {runCols} FROM {runs} WHERE run_id = $1
