-- The operators' side (issue 18): a terminal status cancelled, each run's history, and the
-- listing's indexes.

-- +goose Up
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled'));
-- took_over: the latest worker claim took the run over from an attempt whose lease had
-- expired (set by the claim itself, so that its history records the lost lease).
ALTER TABLE runs ADD COLUMN took_over boolean NOT NULL DEFAULT false;

-- A run's history: one row per event, written by the statement of the transition; Get
-- reads the latest ledger.MaxHistory. The events go with their run.
CREATE TABLE run_events (
    run_id  text        NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq     bigint      GENERATED ALWAYS AS IDENTITY,
    at      timestamptz NOT NULL,
    kind    text        NOT NULL,
    attempt bigint      NOT NULL,
    worker  text        NOT NULL DEFAULT '',
    actor   text        NOT NULL DEFAULT '',
    text    text        NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, seq)
);

-- List: newest first by creation or by update time, unfiltered or with one equality
-- filter; the run ID breaks ties (the keyset cursor).
CREATE INDEX runs_created_idx ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_status_created_idx ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_job_created_idx ON runs (job, created_at DESC, run_id DESC);
CREATE INDEX runs_namespace_created_idx ON runs (namespace, created_at DESC, run_id DESC);
CREATE INDEX runs_updated_idx ON runs (updated_at DESC, run_id DESC);
CREATE INDEX runs_status_updated_idx ON runs (status, updated_at DESC, run_id DESC);
-- ListEffects: a run's effects by name.
CREATE INDEX effects_run_idx ON effects (run_id, name);

-- +goose Down
DROP INDEX effects_run_idx;
DROP INDEX runs_status_updated_idx;
DROP INDEX runs_updated_idx;
DROP INDEX runs_namespace_created_idx;
DROP INDEX runs_job_created_idx;
DROP INDEX runs_status_created_idx;
DROP INDEX runs_created_idx;
DROP TABLE run_events;
ALTER TABLE runs DROP COLUMN took_over;
DELETE FROM runs WHERE status = 'cancelled';
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed'));
