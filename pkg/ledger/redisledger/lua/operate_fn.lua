-- Defines operate(), the operate script's compare-and-set of the run: false,
-- writing nothing, when the run changed since it was read; else it writes the run, its
-- indexes and its events, and returns true.

local function operate()
  local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'deadline', 'not_before',
    'attempts_made', 'updated_at', 'expire_at')
  for i = 1, 8 do
    if (st[i] or '') ~= ARGV[i + 1] then return false end
  end
  redis.call('HSET', KEYS[1], 'status', ARGV[10], 'attempt_id', ARGV[11], 'deadline', ARGV[12],
    'not_before', ARGV[13], 'attempts_made', ARGV[14], 'last_error', ARGV[15], 'updated_at', ARGV[16],
    'completed_at', ARGV[17], 'expire_at', ARGV[18])
  local events = {}
  for i = 1, tonumber(ARGV[20]) do events[i] = ARGV[20 + i] end
  index_run(ARGV[1], st[1], ARGV[10], num(ARGV[12]), tonumber(ARGV[18]), ARGV[19], events, tonumber(ARGV[16]))
  return true
end
