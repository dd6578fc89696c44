-- Reads an effect. $1 effect key.
SELECT {effectCols} FROM {effects} WHERE effect_key = $1
