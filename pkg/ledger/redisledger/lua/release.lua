-- release: ARGV now, id, attempt, attempt_id, error, retry after (µs, ≥ 0), pickup (µs),
-- retention (µs), grace (ms), progress (empty: unchanged), prefix.

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'attempts_made')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local retry = tonumber(ARGV[6])
local nb = ''
if retry > 0 then nb = fmt(now + retry) end
local deadline = now + retry + tonumber(ARGV[7])
local exp = expiry(now, deadline, num(nb), tonumber(ARGV[8]))
redis.call('HSET', KEYS[1], 'status', 'queued', 'attempts_made', fmt(num(st[4]) + 1), 'last_error', ARGV[5],
  'not_before', nb, 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[10]) end
index_run(ARGV[2], 'running', 'queued', deadline, exp, ARGV[9],
  {event(now, 'released', tonumber(ARGV[3]), ARGV[5])}, now)
return {1, fmt(now), run_fields(KEYS[1])}
