package redisreceiver

import "github.com/redis/go-redis/v9"

// The store's rules (pkg/receiver/driver) in Lua, each one script run atomically by the
// server, judged by its clock (TIME). Times are µs since the epoch. A key's record is a
// hash (fields below); a run's fence a hash of attempt and expire. Every key expires (its
// PEXPIREAT) at the record's expire_at, rounded up to the millisecond, and a record
// whose expire_at passed is treated as absent meanwhile.
//
// Replies: a record is the array recordFields names, in that order (false for a missing
// field); an error reply "LEASE_LOST ..." is receiver.ErrLeaseLost.

const luaCommon = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%d', n) end
local FIELDS = {'fp', 'state', 'token', 'attempt', 'lease', 'status', 'header', 'body', 'omitted', 'created', 'updated', 'expire'}
local function read(key)
  return redis.call('HMGET', key, unpack(FIELDS))
end
local function write(key, rec, expire)
  local args = {}
  for i, f in ipairs(FIELDS) do
    if rec[i] then
      table.insert(args, f)
      table.insert(args, rec[i])
    end
  end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(args))
  redis.call('PEXPIREAT', key, math.ceil(expire / 1000))
end
`

// claimScript: KEYS[1] the key's record, KEYS[2] the run's fence; ARGV: has_key,
// fingerprint, token, lease_us, retention_us, has_fence, attempt. Reply: {outcome,
// fence, lease_left_us, record...}.
var claimScript = redis.NewScript(luaCommon + `
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
`)

// holds is the common check of renew, complete and release: the record of KEYS[1] in
// flight under ARGV[1].
const luaHolds = `
local function holds(r, token) return r[1] and r[2] == 'in_flight' and r[3] == token end
`

// renewScript: KEYS[1]; ARGV: token, lease_us, retention_us.
var renewScript = redis.NewScript(luaCommon + luaHolds + `
local now = now_us()
local r = read(KEYS[1])
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key not in flight under this token') end
local until_ = now + tonumber(ARGV[2])
local exp = until_ + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease', fmt(until_), 'updated', fmt(now), 'expire', fmt(exp))
redis.call('PEXPIREAT', KEYS[1], math.ceil(exp / 1000))
return 1
`)

// completeScript: KEYS[1]; ARGV: token, status, header, body, omitted, retention_us.
var completeScript = redis.NewScript(luaCommon + luaHolds + `
local now = now_us()
local r = read(KEYS[1])
if r[1] and r[2] == 'completed' and r[3] == ARGV[1] then return 0 end
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key not in flight under this token') end
local exp = now + tonumber(ARGV[6])
local rec = {r[1], 'completed', r[3], r[4], false, ARGV[2], ARGV[3], ARGV[4], ARGV[5], r[10], fmt(now), fmt(exp)}
write(KEYS[1], rec, exp)
return 1
`)

// releaseScript: KEYS[1]; ARGV: token.
var releaseScript = redis.NewScript(luaCommon + luaHolds + `
local r = read(KEYS[1])
if not r[1] then return 0 end
if not holds(r, ARGV[1]) then return redis.error_reply('LEASE_LOST key held by another token or completed') end
redis.call('DEL', KEYS[1])
return 1
`)

// getScript: KEYS[1]. Reply: the record, or an empty array.
var getScript = redis.NewScript(luaCommon + `
local r = read(KEYS[1])
if not r[1] then return {} end
return r
`)
