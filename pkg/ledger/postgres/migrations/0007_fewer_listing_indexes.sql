-- +goose Up
-- Four of the listing's six indexes go (issue 16). Every transition changes a run's
-- status, updated_at or deadline, so none is a HOT update: each writes an entry into
-- every index of runs, and the claim, the worker claim and the completion of every run
-- paid for six listing indexes the operators' rare listings read. What is left serves
-- them all (operators.go):
--   no filter, by creation              runs_created_idx
--   job or namespace, by creation       runs_created_idx, filtered
--   a status, by creation               runs_status_updated_idx's rows of that status,
--                                       sorted (few: a live or failed status), or
--                                       runs_created_idx, filtered (a common one): the
--                                       planner's choice
--   a status, by update                 runs_status_updated_idx
--   no status, by update                runs_status_updated_idx, one scan per status,
--                                       merged
DROP INDEX runs_status_created_idx;
DROP INDEX runs_job_created_idx;
DROP INDEX runs_namespace_created_idx;
DROP INDEX runs_updated_idx;

-- +goose Down
CREATE INDEX runs_status_created_idx ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_job_created_idx ON runs (job, created_at DESC, run_id DESC);
CREATE INDEX runs_namespace_created_idx ON runs (namespace, created_at DESC, run_id DESC);
CREATE INDEX runs_updated_idx ON runs (updated_at DESC, run_id DESC);
