-- +goose Up
-- Only the primary key can find a run by its ID (issue 16). The listing's two indexes end
-- with run_id, the keyset's tie-breaker, and the planner could answer run_id = $1 from
-- either (a whole scan with the ID as a condition on its last column) when the statistics
-- made every index look alike: on a table analysed while it was empty, or emptied by a
-- sweep whose pages remain, every statement of a worker read all of runs_created_idx, and
-- kept the plan as the table grew, until the next ANALYZE. Their run_id is now in the C
-- collation, which no comparison of the ledger's statements uses: the listing orders and
-- pages on run_id COLLATE "C", the same order for the IDs the ledger makes (ASCII), and
-- nothing else can use those columns. Writes to runs wait while the two are rebuilt.
DROP INDEX runs_created_idx;
DROP INDEX runs_status_updated_idx;
CREATE INDEX runs_created_idx ON runs (created_at DESC, run_id COLLATE "C" DESC);
CREATE INDEX runs_status_updated_idx ON runs (status, updated_at DESC, run_id COLLATE "C" DESC);

-- +goose Down
DROP INDEX runs_created_idx;
DROP INDEX runs_status_updated_idx;
CREATE INDEX runs_created_idx ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_status_updated_idx ON runs (status, updated_at DESC, run_id DESC);
