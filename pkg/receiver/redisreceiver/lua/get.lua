-- get: KEYS[1]. Reply: the record, or an empty array.

local r = read(KEYS[1])
if not r[1] then return {} end
return r
