-- renew: KEYS[1]; ARGV: token, lease_us, retention_us.

local now = now_us()
local r = read(KEYS[1])
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key not in flight under this token') end
local until_ = now + tonumber(ARGV[2])
local exp = until_ + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease', fmt(until_), 'updated', fmt(now), 'expire', fmt(exp))
redis.call('PEXPIREAT', KEYS[1], math.ceil(exp / 1000))
return 1
