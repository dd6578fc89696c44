-- complete: KEYS[1]; ARGV: token, status, header, body, omitted, retention_us.

local now = now_us()
local r = read(KEYS[1])
if r[1] and r[2] == 'completed' and r[3] == ARGV[1] then return 0 end
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key not in flight under this token') end
local exp = now + tonumber(ARGV[6])
local rec = {r[1], 'completed', r[3], r[4], false, ARGV[2], ARGV[3], ARGV[4], ARGV[5], r[10], fmt(now), fmt(exp)}
write(KEYS[1], rec, exp)
return 1
