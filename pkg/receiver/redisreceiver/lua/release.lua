-- release: KEYS[1]; ARGV: token.

local r = read(KEYS[1])
if not r[1] then return 0 end
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key held by another token or completed') end
redis.call('DEL', KEYS[1])
return 1
