-- Runs: one row per run; times are unix microseconds, 0 for none.
CREATE TABLE runs (
	run_id        TEXT PRIMARY KEY,
	namespace     TEXT NOT NULL,
	job           TEXT NOT NULL,
	key           TEXT NOT NULL,
	schedule_time INTEGER NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed')),
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
	expire_at     INTEGER NOT NULL
);
-- The rescue list: live runs by deadline.
CREATE INDEX runs_rescue ON runs (deadline) WHERE status IN ('queued', 'running');
-- The sweep.
CREATE INDEX runs_expire ON runs (expire_at);

CREATE TABLE effects (
	effect_key TEXT PRIMARY KEY,
	run_id     TEXT NOT NULL,
	name       TEXT NOT NULL,
	status     TEXT NOT NULL CHECK (status IN ('pending', 'done')),
	attempt    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	done_at    INTEGER NOT NULL,
	expire_at  INTEGER NOT NULL
);
CREATE INDEX effects_expire ON effects (expire_at);
