-- Reads a run that a fenced UPDATE did not change, FOR SHARE (the latest
-- version, once a concurrent writer has committed), with the time: $1 the caller's Now,
-- $2 the run.
SELECT {runCols}, {now} FROM {runs} WHERE run_id = $2 FOR SHARE
