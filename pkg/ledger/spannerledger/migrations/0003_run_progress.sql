-- A run's progress, as the worker last reported it.
ALTER TABLE runs ADD COLUMN progress BYTES(MAX);
