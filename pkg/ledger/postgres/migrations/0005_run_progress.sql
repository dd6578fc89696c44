-- +goose Up
-- How far a run's work has got (JSON, at most ledger.MaxProgress bytes: a batch's items
-- done, failed and total), written by renewals and finishing writes; NULL for none.
ALTER TABLE runs ADD COLUMN progress bytea;

-- +goose Down
ALTER TABLE runs DROP COLUMN progress;
