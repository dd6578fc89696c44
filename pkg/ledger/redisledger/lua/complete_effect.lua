-- complete_effect: KEYS[4] the effect; ARGV now, run id, attempt, attempt_id, effect key,
-- retention (µs), grace (ms), ref. Answers {written, now, run, effect}.

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id')
local es = redis.call('HMGET', KEYS[4], 'status', 'attempt')
if not held(st, ARGV[3], ARGV[4]) or es[1] ~= 'pending' or es[2] ~= ARGV[3] then
  return {0, fmt(now), run_fields(KEYS[1]), redis.call('HGETALL', KEYS[4])}
end
local exp = now + tonumber(ARGV[6])
redis.call('HSET', KEYS[4], 'status', 'done', 'done_at', fmt(now), 'updated_at', fmt(now),
  'expire_at', fmt(exp), 'ref', ARGV[8])
keep_effect(KEYS[4], ARGV[5], exp, ARGV[7])
return {1, fmt(now), {}, redis.call('HGETALL', KEYS[4])}
