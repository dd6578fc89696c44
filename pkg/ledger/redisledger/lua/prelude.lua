-- The prelude of every script that touches a run: the constants ({MAX_HISTORY} and
-- {MAX_TEXT} are ledger.MaxHistory and ledger.MaxEventText, filled in when the package
-- loads) and the functions the scripts share.

local MAX_HISTORY = {MAX_HISTORY}
local MAX_TEXT = {MAX_TEXT}
local STATUSES = {'queued', 'running', 'completed', 'failed', 'cancelled'}

local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%d', n) end
local function num(s)
  if s == false or s == nil or s == '' then return 0 end
  return tonumber(s)
end
local function floordiv(a, b) return math.floor(a / b) end

-- expiry is driver.ExpiryOf: the retention after the latest of now, the deadline and the
-- not-before (0 for none), so that a run never expires before its retry or rescue is due.
local function expiry(now, deadline, nb, ret)
  return math.max(now, deadline, nb) + ret
end

-- rfc3339 formats µs since the epoch as Go's time.RFC3339Nano does in UTC.
local function rfc3339(us)
  local secs = floordiv(us, 1000000)
  local frac = us - secs * 1000000
  local days = floordiv(secs, 86400)
  local rem = secs - days * 86400
  -- civil from days (H. Hinnant)
  local z = days + 719468
  local era = floordiv(z, 146097)
  local doe = z - era * 146097
  local yoe = floordiv(doe - floordiv(doe, 1460) + floordiv(doe, 36524) - floordiv(doe, 146096), 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floordiv(yoe, 4) - floordiv(yoe, 100))
  local mp = floordiv(5 * doy + 2, 153)
  local d = doy - floordiv(153 * mp + 2, 5) + 1
  local m = mp + 3
  if m > 12 then m = m - 12 end
  if m <= 2 then y = y + 1 end
  local s = string.format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d,
    floordiv(rem, 3600), floordiv(rem % 3600, 60), rem % 60)
  if frac > 0 then
    local f = string.format('%06d', frac):gsub('0+$', '')
    s = s .. '.' .. f
  end
  return s .. 'Z'
end

-- clip is driver.ClipText: at most MAX_TEXT bytes, cut before a UTF-8 continuation byte.
local function clip(s)
  if not s then return '' end
  if #s <= MAX_TEXT then return s end
  local cut = MAX_TEXT
  while cut > 0 do
    local b = string.byte(s, cut + 1)
    if b < 128 or b >= 192 then break end
    cut = cut - 1
  end
  return string.sub(s, 1, cut)
end

-- event is one history entry, as ledger.Event's JSON: what driver.Record adds.
local function event(now, kind, attempt, text, worker)
  local e = {at = rfc3339(now), kind = kind, attempt = attempt}
  text = clip(text)
  if text ~= '' then e.text = text end
  worker = clip(worker)
  if worker ~= '' then e.worker = worker end
  return cjson.encode(e)
end

-- append returns history h (lines) with events added, the latest MAX_HISTORY kept.
local function append(h, events)
  h = (h or '') .. table.concat(events, '\n') .. '\n'
  local n = 0
  for _ in string.gmatch(h, '\n') do n = n + 1 end
  if n > MAX_HISTORY then
    local pos = 0
    for _ = 1, n - MAX_HISTORY do pos = string.find(h, '\n', pos + 1, true) end
    h = string.sub(h, pos + 1)
  end
  return h
end

-- run_fields answers a run's fields (HGETALL's flat list) without its history.
local function run_fields(key)
  local h = redis.call('HGETALL', key)
  for i = 1, #h, 2 do
    if h[i] == 'history' then
      table.remove(h, i)
      table.remove(h, i)
      break
    end
  end
  return h
end

-- keep sets the key's expiry to expire_at plus the grace (ms); never in the past of the
-- server's real clock, so that a record written with a caller's Now in the past lives the
-- grace too. An effect's key is kept at least as long as its run's (see keep_effect).
local function keep(key, expire_us, grace_ms)
  local t = redis.call('TIME')
  local at = math.max(floordiv(expire_us, 1000) + 1, tonumber(t[1]) * 1000 + floordiv(tonumber(t[2]), 1000))
  redis.call('PEXPIREAT', key, at + tonumber(grace_ms))
end

-- index_run files a run just written at now (its status was old; false when the write
-- created it, with its history, and then new holds its created_at, job and namespace)
-- in the rescue, expiry and listing indexes, appends the transition's events to its
-- history, sets its key's expiry, and keeps each of its effects (the run's 'effects'
-- field lists their keys) at least as long as the run. The script's last ARGV is the
-- ledger's key prefix.
local function index_run(id, old, status, deadline, expire_us, grace_ms, events, now, new)
  local P = ARGV[#ARGV]
  if status == 'queued' or status == 'running' then
    redis.call('ZADD', KEYS[2], deadline, id)
  else
    redis.call('ZREM', KEYS[2], id)
  end
  redis.call('ZADD', KEYS[3], expire_us, 'r:' .. id)
  keep(KEYS[1], expire_us, grace_ms)
  local L = P .. 'list:'
  local created
  if new then
    created = new[1]
    redis.call('ZADD', L .. 'created', created, id)
    redis.call('ZADD', L .. 'created:job:' .. new[2], created, id)
    redis.call('ZADD', L .. 'created:ns:' .. new[3], created, id)
    redis.call('ZADD', L .. 'id', 0, id)
    redis.call('HSET', P .. 'names', id, cjson.encode({new[2], new[3]}))
  end
  if old ~= status then
    if old then
      redis.call('ZREM', L .. 'created:status:' .. old, id)
      redis.call('ZREM', L .. 'updated:status:' .. old, id)
    end
    if not created then created = redis.call('HGET', KEYS[1], 'created_at') end
    redis.call('ZADD', L .. 'created:status:' .. status, created, id)
  end
  redis.call('ZADD', L .. 'updated', fmt(now), id)
  redis.call('ZADD', L .. 'updated:status:' .. status, fmt(now), id)
  if #events > 0 then
    redis.call('HSET', KEYS[1], 'history', append(redis.call('HGET', KEYS[1], 'history'), events))
  end
  if new then return end
  local effects = redis.call('HGET', KEYS[1], 'effects')
  if effects then
    for ekey in string.gmatch(effects, '%S+') do
      local key = P .. 'eff:' .. ekey
      local e = redis.call('HGET', key, 'expire_at')
      if e and num(e) < expire_us then
        redis.call('HSET', key, 'expire_at', fmt(expire_us))
        redis.call('ZADD', KEYS[3], expire_us, 'e:' .. ekey)
        keep(key, expire_us, grace_ms)
      end
    end
  end
end

-- unindex_run drops a deleted (or expired) run's entries in the listing indexes and its
-- names entry; job and ns are its job and namespace, false when unknown: they are then
-- taken from the names (and without them, those two indexes drop the entry when a
-- listing finds it stale).
local function unindex_run(P, id, job, ns)
  local L = P .. 'list:'
  redis.call('ZREM', L .. 'created', id)
  redis.call('ZREM', L .. 'updated', id)
  redis.call('ZREM', L .. 'id', id)
  for _, s in ipairs(STATUSES) do
    redis.call('ZREM', L .. 'created:status:' .. s, id)
    redis.call('ZREM', L .. 'updated:status:' .. s, id)
  end
  if not job or not ns then
    local names = redis.call('HGET', P .. 'names', id)
    if names then
      local t = cjson.decode(names)
      job, ns = t[1], t[2]
    end
  end
  if job then redis.call('ZREM', L .. 'created:job:' .. job, id) end
  if ns then redis.call('ZREM', L .. 'created:ns:' .. ns, id) end
  redis.call('HDEL', P .. 'names', id)
end

-- trim drops up to 10 expiry-index entries older than the grace by the server's real
-- clock: their keys have expired in Redis (a rewritten record's entry carries its new
-- expire_at), so the index needs no sweeper either; an expired run's listing entries go
-- with its entry. A run whose key has not expired yet (it is kept the grace past the
-- real clock of its last write, or expires in the next millisecond) is filed again at
-- the real now, to be looked at once more a grace later.
local function trim(grace_ms)
  local P = ARGV[#ARGV]
  local t = redis.call('TIME')
  local real = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local before = (floordiv(real, 1000) - tonumber(grace_ms)) * 1000
  local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. fmt(before), 'LIMIT', 0, 10)
  for _, m in ipairs(stale) do
    local id = string.sub(m, 3)
    if string.sub(m, 1, 2) ~= 'r:' then
      redis.call('ZREM', KEYS[3], m)
    elseif redis.call('EXISTS', P .. 'run:' .. id) == 1 then
      redis.call('ZADD', KEYS[3], real, m)
    else
      redis.call('ZREM', KEYS[3], m)
      unindex_run(P, id, false, false)
    end
  end
end

-- keep_effect files an effect written with expire_us in the expiry index and sets its
-- key's expiry, never before its run's (KEYS[1]): an effect written after its run's last
-- write keeps its own expire_at, but its index entry and its key's expiry are at least
-- the run's, so neither the sweep nor trim takes it up while the run lives.
local function keep_effect(key, ekey, expire_us, grace_ms)
  local at = math.max(expire_us, num(redis.call('HGET', KEYS[1], 'expire_at')))
  redis.call('ZADD', KEYS[3], at, 'e:' .. ekey)
  keep(key, at, grace_ms)
end

local function held(st, attempt, aid)
  return st[1] == 'running' and st[2] == attempt and st[3] == aid
end
