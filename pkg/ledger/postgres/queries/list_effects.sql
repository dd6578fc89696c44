-- $1 run, $2 limit.
SELECT {effectCols} FROM {effects} WHERE run_id = $1 ORDER BY name LIMIT $2
