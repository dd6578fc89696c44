-- list_rescue: KEYS[1] the rescue index; ARGV now, limit, run key prefix. Answers
-- {now, {run fields, …}} for live runs past their deadline, oldest deadline first; index
-- entries whose run is gone are dropped.

local now = now_us(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now), 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local h = run_fields(ARGV[3] .. id)
  if #h == 0 then
    redis.call('ZREM', KEYS[1], id)
  else
    table.insert(out, h)
  end
end
return {fmt(now), out}
