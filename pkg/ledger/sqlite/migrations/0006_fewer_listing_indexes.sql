-- Four of the listing's six indexes go, as PostgreSQL's migration 00007 did (issue 16).
-- A write of a run updates every index over a column it sets: each transition changes
-- the status and update time, so it rewrote runs_status_created and runs_updated too, and
-- a claim inserted into all eight indexes, for listings operators run rarely. What is
-- left serves them all (List in ops.go):
--   no filter, by creation              runs_created
--   job or namespace, by creation       runs_created, filtered
--   a status, by creation               runs_status_updated's rows of that status,
--                                       sorted, when there are few; else runs_created,
--                                       filtered (a bounded count decides)
--   a status, by update                 runs_status_updated
--   no status, by update                runs_status_updated, one scan per status,
--                                       merged
DROP INDEX runs_status_created;
DROP INDEX runs_job_created;
DROP INDEX runs_namespace_created;
DROP INDEX runs_updated;
