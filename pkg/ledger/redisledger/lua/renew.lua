-- renew: ARGV now, id, attempt, attempt_id, lease (µs), retention (µs), grace (ms),
-- progress (empty: unchanged), prefix. ExpireAt never moves back: max(old, ExpiryOf).

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'expire_at', 'not_before')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local deadline = now + tonumber(ARGV[5])
local exp = math.max(num(st[4]), expiry(now, deadline, num(st[5]), tonumber(ARGV[6])))
redis.call('HSET', KEYS[1], 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[8]) end
index_run(ARGV[2], 'running', 'running', deadline, exp, ARGV[7], {}, now)
return {1, fmt(now), run_fields(KEYS[1])}
