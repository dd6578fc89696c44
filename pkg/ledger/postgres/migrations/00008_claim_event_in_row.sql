-- +goose Up
-- The ingress claim's event is the run's row, not a row of run_events (issue 16): every
-- run the ingress creates has exactly one, at its creation, attempt 0, so the claim
-- sets ingress_claim and Get puts the event first in the history it reads. Runs created
-- before keep their stored event (ingress_claim false), and so do runs a worker claim
-- created (no ingress claim: no event).
ALTER TABLE runs ADD COLUMN ingress_claim boolean NOT NULL DEFAULT false;

-- +goose Down
INSERT INTO run_events (run_id, at, kind, attempt) SELECT run_id, created_at, 'claimed', 0 FROM runs WHERE ingress_claim;
ALTER TABLE runs DROP COLUMN ingress_claim;
