-- The ledger's tables. They are created unqualified: the migration runs with search_path set
-- to the ledger's schema (Options.Schema), so goose's version table lands there too.

-- +goose Up
CREATE TABLE runs (
    run_id        text        PRIMARY KEY,
    namespace     text        NOT NULL,
    job           text        NOT NULL,
    run_key       text        NOT NULL,
    schedule_time timestamptz,
    payload_hash  text        NOT NULL,
    -- payload: the caller's payload, kept so that the rescuer can republish the run.
    payload       bytea,
    status        text        NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed')),
    -- attempt is the fencing token: bumped by every worker claim, 0 until the first.
    attempt       bigint      NOT NULL DEFAULT 0,
    attempt_id    text        NOT NULL DEFAULT '',
    -- deadline: pickup deadline when queued, lease expiry when running, NULL when terminal.
    deadline      timestamptz,
    not_before    timestamptz,
    attempts_made bigint      NOT NULL DEFAULT 0,
    last_error    text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    completed_at  timestamptz,
    expire_at     timestamptz NOT NULL
);

-- ListRescue: live runs past their deadline, oldest first.
CREATE INDEX runs_rescue_idx ON runs (deadline) WHERE status IN ('queued', 'running');
-- Sweep: records past their retention.
CREATE INDEX runs_expire_at_idx ON runs (expire_at);

CREATE TABLE effects (
    effect_key text        PRIMARY KEY,
    run_id     text        NOT NULL,
    name       text        NOT NULL,
    status     text        NOT NULL CHECK (status IN ('pending', 'done')),
    attempt    bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    done_at    timestamptz,
    expire_at  timestamptz NOT NULL
);

CREATE INDEX effects_expire_at_idx ON effects (expire_at);

-- +goose Down
DROP TABLE effects;
DROP TABLE runs;
