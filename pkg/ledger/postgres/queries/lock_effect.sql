-- Reads and locks an effect for an operator's transition (after its run:
-- lock_for_operator.sql).
SELECT {effectCols} FROM {effects} WHERE effect_key = $1 FOR UPDATE
