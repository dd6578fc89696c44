-- $2 limit.

SELECT {runCols} FROM {runs}
WHERE status IN ('queued', 'running') AND deadline < {now}
ORDER BY deadline
LIMIT $2
