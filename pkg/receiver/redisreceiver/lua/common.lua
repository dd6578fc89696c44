-- The functions every script uses: the server's time in µs, and a key's record read and
-- written as the fields FIELDS names.

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
