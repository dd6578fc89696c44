-- +goose Up
-- The completion's event is the run's row, not a row of run_events (issue 16): completed
-- is terminal (no transition leaves it), so a run has at most one such event, the last of
-- its history, at completed_at, of the run's attempt. The completing statements set
-- completed_event, and Get puts the event last in the history it reads. Runs completed
-- before keep their stored event (completed_event false).
ALTER TABLE runs ADD COLUMN completed_event boolean NOT NULL DEFAULT false;

-- +goose Down
INSERT INTO run_events (run_id, at, kind, attempt, text) SELECT run_id, completed_at, 'completed', attempt, '' FROM runs WHERE completed_event;
ALTER TABLE runs DROP COLUMN completed_event;
