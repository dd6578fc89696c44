-- rescue: ARGV now, id, status, attempt, deadline (µs), pickup (µs), retention (µs),
-- lost-lease error, grace (ms), prefix. A running run's lease is lost (lease_lost), a
-- queued one is made due again (rescued).

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'deadline', 'attempts_made')
if st[1] ~= ARGV[3] or st[2] ~= ARGV[4] or st[3] ~= ARGV[5]
  or (st[1] ~= 'queued' and st[1] ~= 'running') or num(st[3]) >= now then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local ev = event(now, 'rescued', tonumber(ARGV[4]))
if st[1] == 'running' then
  redis.call('HSET', KEYS[1], 'attempts_made', fmt(num(st[4]) + 1), 'last_error', ARGV[8],
    'attempt_id', '', 'status', 'queued')
  ev = event(now, 'lease_lost', tonumber(ARGV[4]), ARGV[8])
end
local deadline = now + tonumber(ARGV[6])
local exp = expiry(now, deadline, 0, tonumber(ARGV[7]))
redis.call('HSET', KEYS[1], 'not_before', '', 'deadline', fmt(deadline), 'updated_at', fmt(now),
  'expire_at', fmt(exp))
index_run(ARGV[2], st[1], 'queued', deadline, exp, ARGV[9], {ev}, now)
return {1, fmt(now), run_fields(KEYS[1])}
