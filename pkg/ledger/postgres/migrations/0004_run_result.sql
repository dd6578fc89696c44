-- +goose Up
-- What a completed run's attempt returned (JSON, at most ledger.MaxResult bytes), kept as
-- bytes so that a duplicate is answered with exactly what was stored; NULL for none.
ALTER TABLE runs ADD COLUMN result bytea;

-- +goose Down
ALTER TABLE runs DROP COLUMN result;
