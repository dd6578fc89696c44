-- +goose Up
-- A run's events are deleted by the sweep's statement with their run (sweepSQL), not by a
-- foreign key: its check trigger ran once per event, in every transition's statement
-- (a locking read of the run the statement had just written), about a twelfth of a
-- worker's claim and completion on PostgreSQL (issue 16). Events are written only by the
-- statements that write their run, so none is written for a run that does not exist.
ALTER TABLE run_events DROP CONSTRAINT run_events_run_id_fkey;

-- +goose Down
DELETE FROM run_events e WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = e.run_id);
ALTER TABLE run_events ADD CONSTRAINT run_events_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (run_id) ON DELETE CASCADE;
