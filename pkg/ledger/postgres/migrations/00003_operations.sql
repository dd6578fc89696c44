-- The operators' side: the cancelled status, each run's history (a JSON array of at most
-- ledger.MaxHistory events, appended by the statements of queries.go), and the indexes
-- that serve listing runs newest first by status, job or namespace, and a run's effects.

-- +goose Up
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled'));
ALTER TABLE runs ADD COLUMN history jsonb NOT NULL DEFAULT '[]';
CREATE INDEX runs_created_idx ON runs (created_at, run_id);
CREATE INDEX runs_status_created_idx ON runs (status, created_at, run_id);
CREATE INDEX runs_job_created_idx ON runs (job, created_at, run_id);
CREATE INDEX runs_namespace_created_idx ON runs (namespace, created_at, run_id);
CREATE INDEX runs_updated_idx ON runs (updated_at, run_id);
CREATE INDEX runs_status_updated_idx ON runs (status, updated_at, run_id);
CREATE INDEX effects_run_idx ON effects (run_id, name);

-- +goose Down
DROP INDEX effects_run_idx;
DROP INDEX runs_status_updated_idx;
DROP INDEX runs_updated_idx;
DROP INDEX runs_namespace_created_idx;
DROP INDEX runs_job_created_idx;
DROP INDEX runs_status_created_idx;
DROP INDEX runs_created_idx;
ALTER TABLE runs DROP COLUMN history;
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed'));
