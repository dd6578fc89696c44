-- resolve (an operator's resolution of an uncertain effect, decided in Go by
-- driver.ApplyResolveEffect): KEYS[4] the effect; ARGV as operate's up to its events,
-- then at e = 21 + n: the effect's key (without the prefix), the effect as read
-- (status, attempt, updated_at: ARGV[e+1..e+3]), the effect to write (status, attempt,
-- ref, done_at, updated_at, expire_at: ARGV[e+4..e+9]), prefix. It writes the run and
-- the effect only when both are still as read, and answers {1} when it wrote, {0} when
-- either changed since.

local e = 21 + tonumber(ARGV[20])
local es = redis.call('HMGET', KEYS[4], 'status', 'attempt', 'updated_at')
for i = 1, 3 do
  if (es[i] or '') ~= ARGV[e + i] then return {0} end
end
if not operate() then return {0} end
local exp = tonumber(ARGV[e + 9])
redis.call('HSET', KEYS[4], 'status', ARGV[e + 4], 'attempt', ARGV[e + 5], 'ref', ARGV[e + 6],
  'done_at', ARGV[e + 7], 'updated_at', ARGV[e + 8], 'expire_at', ARGV[e + 9])
keep_effect(KEYS[4], ARGV[e], exp, ARGV[19])
return {1}
