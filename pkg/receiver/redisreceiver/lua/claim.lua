-- claim: KEYS[1] the key's record, KEYS[2] the run's fence; ARGV: has_key, fingerprint,
-- token, lease_us, retention_us, has_fence, attempt. Reply: {outcome, fence,
-- lease_left_us, record...}.

local now = now_us()
local has_key, fp, token = ARGV[1] == '1', ARGV[2], ARGV[3]
local lease, retention = tonumber(ARGV[4]), tonumber(ARGV[5])
local attempt = 0
if ARGV[6] == '1' then
  attempt = tonumber(ARGV[7])
  local f = redis.call('HMGET', KEYS[2], 'attempt', 'expire')
  local fence = 0
  if f[1] and tonumber(f[2]) > now then fence = tonumber(f[1]) end
  if fence > attempt then return {'fenced', fence, 0} end
  if fence < attempt then
    local exp = now + retention
    redis.call('DEL', KEYS[2])
    redis.call('HSET', KEYS[2], 'attempt', fmt(attempt), 'expire', fmt(exp))
    redis.call('PEXPIREAT', KEYS[2], math.ceil(exp / 1000))
  end
end
if not has_key then return {'claimed', 0, 0} end
local r = read(KEYS[1])
if r[1] and tonumber(r[12]) > now then
  local reply = {'', 0, 0}
  for i = 1, #r do reply[i + 3] = r[i] end
  if r[1] ~= fp then reply[1] = 'mismatch' return reply end
  if r[2] == 'completed' then reply[1] = 'completed' return reply end
  if tonumber(r[5]) > now then
    reply[1] = 'in_flight'
    reply[3] = tonumber(r[5]) - now
    return reply
  end
end
local until_ = now + lease
local rec = {fp, 'in_flight', token, fmt(attempt), fmt(until_), false, false, false, '0', fmt(now), fmt(now), fmt(until_ + retention)}
write(KEYS[1], rec, until_ + retention)
local reply = {'claimed', 0, 0}
for i = 1, 12 do reply[i + 3] = rec[i] end
return reply
