-- expedite: ARGV now, id, attempt_id, retention (µs), grace (ms), prefix.
-- An untouched ingress claim (queued, attempt 0, the claim's attempt ID) becomes due now.

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'not_before')
if st[1] ~= 'queued' or st[2] ~= '0' or st[3] ~= ARGV[3] then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local exp = expiry(now, now, num(st[4]), tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'deadline', fmt(now), 'updated_at', fmt(now), 'expire_at', fmt(exp))
index_run(ARGV[2], 'queued', 'queued', now, exp, ARGV[5], {}, now)
return {1, fmt(now), run_fields(KEYS[1])}
