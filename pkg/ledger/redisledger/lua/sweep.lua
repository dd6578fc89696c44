-- sweep: KEYS[1] the expiry index, KEYS[2] the rescue index; ARGV now, limit, prefix.
-- Deletes records past expire_at (at most limit index entries), with a run's listing
-- entries, and answers how many records it deleted; entries whose key Redis already
-- expired are dropped without counting (an expired run's listing entries with them). An
-- effect goes only once its run is gone: an expired effect of a run past its own
-- expire_at goes with the run, and one of a live run is filed again under the run's
-- expire_at.

local now = now_us(ARGV[1])
local P = ARGV[3]
local runs, effs = P .. 'run:', P .. 'eff:'
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now), 'LIMIT', 0, tonumber(ARGV[2]))
local n = 0
local function drop_run(id)
  local f = redis.call('HMGET', runs .. id, 'job', 'namespace')
  redis.call('DEL', runs .. id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[1], 'r:' .. id)
  unindex_run(P, id, f[1], f[2])
  n = n + 1
end
for _, m in ipairs(items) do
  local kind, id = string.sub(m, 1, 2), string.sub(m, 3)
  if kind == 'r:' then
    local e = redis.call('HGET', runs .. id, 'expire_at')
    if e and num(e) < now then
      drop_run(id)
    elseif not e then
      redis.call('ZREM', KEYS[1], m)
      unindex_run(P, id, false, false)
    end
  else
    local key = effs .. id
    local f = redis.call('HMGET', key, 'expire_at', 'run_id')
    if not f[1] then
      redis.call('ZREM', KEYS[1], m)
    elseif num(f[1]) < now then
      local run_exp = redis.call('HGET', runs .. (f[2] or ''), 'expire_at')
      if run_exp and num(run_exp) < now then
        drop_run(f[2])
        run_exp = false
      end
      if run_exp then
        redis.call('ZADD', KEYS[1], num(run_exp), m)
      else
        redis.call('DEL', key)
        redis.call('ZREM', KEYS[1], m)
        n = n + 1
      end
    end
  end
end
return n
