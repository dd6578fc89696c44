-- Reads a run. $1 run.
SELECT {runCols} FROM {runs} WHERE run_id = $1
