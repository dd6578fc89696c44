-- +goose Up
-- The ingress claim's event is the run's row, not a row of run_events (issue 16): every
-- run the ingress creates has exactly one, at its creation, attempt 0, so the claim
-- sets ingress_claim and Get puts the event first in the history it reads. Runs created
-- before keep their stored event (ingress_claim false), and so do runs a worker claim
-- created (no ingress claim: no event).
ALTER TABLE runs ADD COLUMN ingress_claim boolean NOT NULL DEFAULT false;

-- +goose Down
-- The claim's event is the first of its run's history, and the history is read in seq
-- order: the run's stored events are taken out and written again after it, in their order.
WITH moved AS (
    DELETE FROM run_events e USING runs r WHERE e.run_id = r.run_id AND r.ingress_claim
    RETURNING e.*
)
INSERT INTO run_events (run_id, at, kind, attempt, worker, actor, text)
SELECT run_id, at, kind, attempt, worker, actor, text FROM (
    SELECT run_id, created_at AS at, 'claimed' AS kind, 0::bigint AS attempt, '' AS worker, '' AS actor, '' AS text, 0::bigint AS seq
    FROM runs WHERE ingress_claim
    UNION ALL
    SELECT run_id, at, kind, attempt, worker, actor, text, seq FROM moved
) h
ORDER BY run_id, seq;
ALTER TABLE runs DROP COLUMN ingress_claim;
