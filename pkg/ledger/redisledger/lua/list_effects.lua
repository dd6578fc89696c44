-- list_effects: KEYS[1] the run; ARGV the effect key prefix. Answers the fields of each
-- effect the run's 'effects' field lists.

local out = {}
local effects = redis.call('HGET', KEYS[1], 'effects')
if effects then
  for ekey in string.gmatch(effects, '%S+') do
    local h = redis.call('HGETALL', ARGV[1] .. ekey)
    if #h > 0 then out[#out + 1] = h end
  end
end
return out
