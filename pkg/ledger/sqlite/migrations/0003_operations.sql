-- The operators' side: the cancelled status, each run's history (JSON, at most
-- ledger.MaxHistory events), and the indexes that serve listing runs newest first by
-- status, job or namespace, and a run's effects. SQLite cannot alter a CHECK
-- constraint: the table is rebuilt.
CREATE TABLE runs_new (
	run_id        TEXT PRIMARY KEY,
	namespace     TEXT NOT NULL,
	job           TEXT NOT NULL,
	key           TEXT NOT NULL,
	schedule_time INTEGER NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
	attempt       INTEGER NOT NULL,
	attempt_id    TEXT NOT NULL,
	deadline      INTEGER NOT NULL,
	not_before    INTEGER NOT NULL,
	payload_hash  TEXT NOT NULL,
	payload       BLOB NOT NULL,
	attempts_made INTEGER NOT NULL,
	last_error    TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL,
	completed_at  INTEGER NOT NULL,
	expire_at     INTEGER NOT NULL,
	history       TEXT NOT NULL DEFAULT ''
);
INSERT INTO runs_new (run_id, namespace, job, key, schedule_time, status, attempt, attempt_id, deadline,
	not_before, payload_hash, payload, attempts_made, last_error, created_at, updated_at, completed_at, expire_at)
SELECT run_id, namespace, job, key, schedule_time, status, attempt, attempt_id, deadline,
	not_before, payload_hash, payload, attempts_made, last_error, created_at, updated_at, completed_at, expire_at FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_rescue ON runs (deadline) WHERE status IN ('queued', 'running');
CREATE INDEX runs_expire ON runs (expire_at);
CREATE INDEX runs_created ON runs (created_at, run_id);
CREATE INDEX runs_status_created ON runs (status, created_at, run_id);
CREATE INDEX runs_job_created ON runs (job, created_at, run_id);
CREATE INDEX runs_namespace_created ON runs (namespace, created_at, run_id);
CREATE INDEX runs_updated ON runs (updated_at, run_id);
CREATE INDEX runs_status_updated ON runs (status, updated_at, run_id);
CREATE INDEX effects_run ON effects (run_id, name);
