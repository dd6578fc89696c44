-- claim: ARGV now, id, namespace, job, key, schedule_time, payload_hash, payload,
-- attempt_id, pickup (µs), retention (µs), grace (ms), prefix.

local now = now_us(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local deadline = now + tonumber(ARGV[10])
local exp = expiry(now, deadline, 0, tonumber(ARGV[11]))
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'namespace', ARGV[3], 'job', ARGV[4], 'key', ARGV[5],
  'schedule_time', ARGV[6], 'payload_hash', ARGV[7], 'payload', ARGV[8], 'status', 'queued',
  'attempt', '0', 'attempt_id', ARGV[9], 'deadline', fmt(deadline), 'not_before', '',
  'attempts_made', '0', 'last_error', '', 'created_at', fmt(now), 'updated_at', fmt(now),
  'completed_at', '', 'expire_at', fmt(exp), 'history', event(now, 'claimed', 0) .. '\n')
index_run(ARGV[2], false, 'queued', deadline, exp, ARGV[12], {}, now, {fmt(now), ARGV[4], ARGV[3]})
trim(ARGV[12])
return {1, fmt(now), run_fields(KEYS[1])}
