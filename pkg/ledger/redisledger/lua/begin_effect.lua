-- begin_effect: KEYS[4] the effect; ARGV now, run id, attempt, attempt_id, name, effect
-- key, retention (µs), grace (ms). Answers {written, now, run, effect, previous attempt}.

local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id')
local es = redis.call('HMGET', KEYS[4], 'status', 'attempt')
if not held(st, ARGV[3], ARGV[4]) or es[1] == 'done' then
  return {0, fmt(now), run_fields(KEYS[1]), redis.call('HGETALL', KEYS[4]), '0'}
end
local prev = '0'
if es[1] then
  prev = es[2]
else
  redis.call('HSET', KEYS[4], 'key', ARGV[6], 'run_id', ARGV[2], 'name', ARGV[5], 'created_at', fmt(now),
    'done_at', '', 'ref', '')
  local effects = redis.call('HGET', KEYS[1], 'effects')
  if not effects then effects = ARGV[6] else effects = effects .. ' ' .. ARGV[6] end
  redis.call('HSET', KEYS[1], 'effects', effects)
end
local exp = now + tonumber(ARGV[7])
redis.call('HSET', KEYS[4], 'status', 'pending', 'attempt', ARGV[3], 'updated_at', fmt(now),
  'expire_at', fmt(exp))
keep_effect(KEYS[4], ARGV[6], exp, ARGV[8])
return {1, fmt(now), {}, redis.call('HGETALL', KEYS[4]), prev}
