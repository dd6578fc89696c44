-- Adds one event to a run's history.
INSERT INTO {events} (run_id, at, kind, attempt, worker, actor, text)
VALUES ($1, $2, $3, $4, $5, $6, $7)
