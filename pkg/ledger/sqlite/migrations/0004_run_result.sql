-- What a completed run's attempt returned (JSON, at most ledger.MaxResult bytes); NULL for none.
ALTER TABLE runs ADD COLUMN result BLOB;
