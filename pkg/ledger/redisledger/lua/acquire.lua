-- acquire: ARGV now, id, namespace, job, key, schedule_time, payload_hash, payload,
-- attempt_id, lease (µs), retention (µs), grace (ms), must exist ("1" or ""), worker,
-- prefix. An absent run with must exist, or a run with another payload hash, is not
-- written (the state machine says ErrNotFound, PayloadMismatch).

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'not_before', 'deadline', 'attempt', 'attempts_made',
  'payload_hash')
local status = st[1]
local deadline = now + tonumber(ARGV[10])
local exp = expiry(now, deadline, 0, tonumber(ARGV[11]))
if not status and ARGV[13] == '1' then
  return {0, fmt(now), {}}
end
if status and st[6] ~= ARGV[7] then
  return {0, fmt(now), run_fields(KEYS[1])}
end
if not status then
  redis.call('HSET', KEYS[1], 'id', ARGV[2], 'namespace', ARGV[3], 'job', ARGV[4], 'key', ARGV[5],
    'schedule_time', ARGV[6], 'payload_hash', ARGV[7], 'payload', ARGV[8], 'status', 'running',
    'attempt', '1', 'attempt_id', ARGV[9], 'deadline', fmt(deadline), 'not_before', '',
    'attempts_made', '0', 'last_error', '', 'created_at', fmt(now), 'updated_at', fmt(now),
    'completed_at', '', 'expire_at', fmt(exp), 'history', event(now, 'started', 1, '', ARGV[14]) .. '\n')
  index_run(ARGV[2], false, 'running', deadline, exp, ARGV[12], {}, now, {fmt(now), ARGV[4], ARGV[3]})
  return {1, fmt(now), run_fields(KEYS[1])}
end
if status == 'completed' or status == 'failed' or status == 'cancelled'
  or (status == 'queued' and num(st[2]) > now)
  or (status == 'running' and num(st[3]) >= now) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local attempt = num(st[4])
local events = {}
if status == 'running' then
  local lost = 'attempt ' .. fmt(attempt) .. ' lost its lease at ' .. rfc3339(num(st[3]))
  redis.call('HSET', KEYS[1], 'attempts_made', fmt(num(st[5]) + 1), 'last_error', lost)
  table.insert(events, event(now, 'lease_lost', attempt, lost))
end
redis.call('HSET', KEYS[1], 'status', 'running', 'attempt', fmt(attempt + 1), 'attempt_id', ARGV[9],
  'not_before', '', 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
table.insert(events, event(now, 'started', attempt + 1, '', ARGV[14]))
index_run(ARGV[2], status, 'running', deadline, exp, ARGV[12], events, now)
return {1, fmt(now), run_fields(KEYS[1])}
