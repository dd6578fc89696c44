-- The shard of a run (Shards of them): the value of its ID's first hex digit, computed
-- and stored by Spanner, so no write sends it. Every index below leads with it: an
-- index led by a time (or by a status, then a time) takes every write at the current
-- time in one key range, the hot spot of
-- https://cloud.google.com/spanner/docs/schema-design; led by the shard, the writes
-- spread over Shards ranges, and the listing, the rescue and the sweep read each shard.
ALTER TABLE runs ADD COLUMN shard INT64 AS (STRPOS('0123456789abcdef', SUBSTR(run_id, 1, 1)) - 1) STORED;
-- Live runs only: a terminal run's deadline is NULL.
CREATE NULL_FILTERED INDEX runs_by_shard_deadline ON runs (shard, deadline);
CREATE INDEX runs_by_shard_expire_at ON runs (shard, expire_at);
-- The operators' listing (List): newest first, by creation or by update time,
-- unfiltered or with one equality filter; the run ID, the primary key, breaks ties.
CREATE INDEX runs_by_shard_created ON runs (shard, created_at DESC);
CREATE INDEX runs_by_shard_status_created ON runs (shard, status, created_at DESC);
CREATE INDEX runs_by_shard_job_created ON runs (shard, job, created_at DESC);
CREATE INDEX runs_by_shard_namespace_created ON runs (shard, namespace, created_at DESC);
CREATE INDEX runs_by_shard_updated ON runs (shard, updated_at DESC);
CREATE INDEX runs_by_shard_status_updated ON runs (shard, status, updated_at DESC);
DROP INDEX runs_by_deadline;
DROP INDEX runs_by_expire_at;
DROP INDEX runs_by_created;
DROP INDEX runs_by_status_created;
DROP INDEX runs_by_job_created;
DROP INDEX runs_by_namespace_created;
DROP INDEX runs_by_updated;
DROP INDEX runs_by_status_updated;
