-- finish (complete, fail): ARGV now, id, attempt, attempt_id, status, error, retention
-- (µs), grace (ms), result (empty for none), progress (empty: unchanged), prefix (always
-- the last ARGV). ledger.Ledger checked result and progress. A failure's event carries
-- the run's last error (the
-- attempt's, or the one before when it gave none), a completion's none.

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'attempts_made', 'last_error')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local exp = now + tonumber(ARGV[7])
local last = st[5]
if ARGV[6] ~= '' then
  last = ARGV[6]
  redis.call('HSET', KEYS[1], 'last_error', last)
end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[10]) end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'attempts_made', fmt(num(st[4]) + 1), 'deadline', '',
  'not_before', '', 'completed_at', fmt(now), 'updated_at', fmt(now), 'expire_at', fmt(exp))
local text = ''
if ARGV[5] == 'failed' then text = last end
index_run(ARGV[2], 'running', ARGV[5], 0, exp, ARGV[8], {event(now, ARGV[5], tonumber(ARGV[3]), text)}, now)
return {1, fmt(now), run_fields(KEYS[1])}
