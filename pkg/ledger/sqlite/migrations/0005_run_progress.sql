-- How far a run's work has got (JSON, at most ledger.MaxProgress bytes); NULL for none.
ALTER TABLE runs ADD COLUMN progress BLOB;
