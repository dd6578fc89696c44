-- +goose Up
-- What an effect made (e.g. a started Workflows execution's name), recorded when it is done.
ALTER TABLE effects ADD COLUMN ref text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE effects DROP COLUMN ref;
