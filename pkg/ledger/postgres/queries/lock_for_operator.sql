-- Reads and locks a run, with the database's time, for an operator's
-- transition (decided in Go by the driver's rules, then written by write_run.sql).
SELECT {runCols}, {now} FROM {runs} WHERE run_id = $2 FOR UPDATE
