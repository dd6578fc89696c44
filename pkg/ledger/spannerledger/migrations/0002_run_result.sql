-- A run's result (Complete's, Fail's).
ALTER TABLE runs ADD COLUMN result BYTES(MAX);
