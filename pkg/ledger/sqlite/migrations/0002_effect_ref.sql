-- What an effect made (e.g. a started Workflows execution's name), recorded when it is done.
ALTER TABLE effects ADD COLUMN ref TEXT NOT NULL DEFAULT '';
