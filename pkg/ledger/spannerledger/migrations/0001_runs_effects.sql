-- The first release's tables: runs, deleted by Spanner past expire_at (the row deletion
-- policy), and effects, interleaved in their run and deleted with it.
CREATE TABLE runs (
		run_id STRING(64) NOT NULL,
		namespace STRING(MAX) NOT NULL,
		job STRING(MAX) NOT NULL,
		run_key STRING(MAX) NOT NULL,
		schedule_time TIMESTAMP,
		payload_hash STRING(MAX) NOT NULL,
		payload BYTES(MAX),
		status STRING(16) NOT NULL,
		attempt INT64 NOT NULL,
		attempt_id STRING(MAX) NOT NULL,
		deadline TIMESTAMP,
		not_before TIMESTAMP,
		attempts_made INT64 NOT NULL,
		last_error STRING(MAX) NOT NULL,
		created_at TIMESTAMP NOT NULL,
		updated_at TIMESTAMP NOT NULL,
		completed_at TIMESTAMP,
		expire_at TIMESTAMP NOT NULL,
		history STRING(MAX)
	) PRIMARY KEY (run_id),
	ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY));
-- The first release's indexes, each led by a time or by the status: replaced by
-- 0004_sharded_indexes.sql.
CREATE NULL_FILTERED INDEX runs_by_deadline ON runs (deadline);
CREATE INDEX runs_by_expire_at ON runs (expire_at);
CREATE INDEX runs_by_created ON runs (created_at DESC);
CREATE INDEX runs_by_status_created ON runs (status, created_at DESC);
CREATE INDEX runs_by_job_created ON runs (job, created_at DESC);
CREATE INDEX runs_by_namespace_created ON runs (namespace, created_at DESC);
CREATE INDEX runs_by_updated ON runs (updated_at DESC);
CREATE INDEX runs_by_status_updated ON runs (status, updated_at DESC);
CREATE TABLE effects (
		run_id STRING(64) NOT NULL,
		name STRING(MAX) NOT NULL,
		effect_key STRING(64) NOT NULL,
		status STRING(16) NOT NULL,
		attempt INT64 NOT NULL,
		created_at TIMESTAMP NOT NULL,
		updated_at TIMESTAMP NOT NULL,
		done_at TIMESTAMP,
		expire_at TIMESTAMP NOT NULL,
		ref STRING(MAX) NOT NULL
	) PRIMARY KEY (run_id, name),
	INTERLEAVE IN PARENT runs ON DELETE CASCADE;
