-- holds is the common check of renew, complete and release: the record of KEYS[1] in
-- flight under ARGV[1].

local function holds(r, token) return r[1] and r[2] == 'in_flight' and r[3] == token end
