package redisledger

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
)

// The Lua scripts, one per transition. Each runs atomically on the server, reads the
// server's clock with TIME (or takes the caller's Now, for tests), and answers
//
//	{written (0 or 1), now (µs since the epoch), run fields (HGETALL), …}
//
// so that when it wrote nothing the Go side can let the state machine of package ledger
// say why (an idempotent repeat, a lost lease, held until …). Times are stored as decimal
// microseconds since the Unix epoch, "" for zero; Lua's numbers are doubles, exact for
// integers below 2^53 (year 2255 in microseconds).
//
// Keys: KEYS[1] is the run's hash, KEYS[2] the rescue index (a sorted set of live run IDs
// scored by deadline), KEYS[3] the expiry index (a sorted set of "r:RUNID" and
// "e:EFFECTKEY" scored by expire_at); the effect scripts add KEYS[4], the effect's hash.
// A run's history is its hash's field history: one ledger.Event JSON a line, oldest
// first, the latest ledger.MaxHistory kept; the scripts answer a run without it (Get
// reads it). The last ARGV of every script that writes a run is the ledger's key prefix
// P, under which it finds the run's other keys: its effects P.."eff:"..EFFECTKEY, the
// listing indexes P.."list:"..NAME (sorted sets of run IDs scored by created_at or
// updated_at: created, created:status:S, created:job:J, created:ns:N, updated,
// updated:status:S; and id, every run ID scored 0, in the lexicographic order
// ZRANGEBYLEX reads) and P.."names", a hash of each indexed run's job and namespace, by
// which an expired run's entries are found again to drop them.
var prelude = `
local MAX_HISTORY = ` + strconv.Itoa(ledger.MaxHistory) + `
local MAX_TEXT = ` + strconv.Itoa(ledger.MaxEventText) + `
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
`

// claim: ARGV now, id, namespace, job, key, schedule_time, payload_hash, payload,
// attempt_id, pickup (µs), retention (µs), grace (ms), prefix.
var claimScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local deadline = now + tonumber(ARGV[10])
local exp = expiry(now, deadline, 0, tonumber(ARGV[11]))
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'namespace', ARGV[3], 'job', ARGV[4], 'key', ARGV[5],
  'schedule_time', ARGV[6], 'payload_hash', ARGV[7], 'payload', ARGV[8], 'status', 'queued',
  'attempt', '0', 'attempt_id', ARGV[9], 'deadline', fmt(deadline), 'not_before', '',
  'attempts_made', '0', 'last_error', '', 'created_at', fmt(now), 'updated_at', fmt(now),
  'completed_at', '', 'expire_at', fmt(exp), 'history', event(now, 'claimed', 0) .. '\n')
index_run(ARGV[2], false, 'queued', deadline, exp, ARGV[12], {}, now, {fmt(now), ARGV[4], ARGV[3]})
trim(ARGV[12])
return {1, fmt(now), run_fields(KEYS[1])}
`)

// expedite: ARGV now, id, attempt_id, retention (µs), grace (ms), prefix.
// An untouched ingress claim (queued, attempt 0, the claim's attempt ID) becomes due now.
var expediteScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'not_before')
if st[1] ~= 'queued' or st[2] ~= '0' or st[3] ~= ARGV[3] then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local exp = expiry(now, now, num(st[4]), tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'deadline', fmt(now), 'updated_at', fmt(now), 'expire_at', fmt(exp))
index_run(ARGV[2], 'queued', 'queued', now, exp, ARGV[5], {}, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// acquire: ARGV now, id, namespace, job, key, schedule_time, payload_hash, payload,
// attempt_id, lease (µs), retention (µs), grace (ms), must exist ("1" or ""), worker,
// prefix. An absent run with must exist, or a run with another payload hash, is not
// written (the state machine says ErrNotFound, PayloadMismatch).
var acquireScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'not_before', 'deadline', 'attempt', 'attempts_made',
  'payload_hash')
local status = st[1]
local deadline = now + tonumber(ARGV[10])
local exp = expiry(now, deadline, 0, tonumber(ARGV[11]))
if not status and ARGV[13] == '1' then
  return {0, fmt(now), {}}
end
if status and st[6] ~= ARGV[7] then
  return {0, fmt(now), run_fields(KEYS[1])}
end
if not status then
  redis.call('HSET', KEYS[1], 'id', ARGV[2], 'namespace', ARGV[3], 'job', ARGV[4], 'key', ARGV[5],
    'schedule_time', ARGV[6], 'payload_hash', ARGV[7], 'payload', ARGV[8], 'status', 'running',
    'attempt', '1', 'attempt_id', ARGV[9], 'deadline', fmt(deadline), 'not_before', '',
    'attempts_made', '0', 'last_error', '', 'created_at', fmt(now), 'updated_at', fmt(now),
    'completed_at', '', 'expire_at', fmt(exp), 'history', event(now, 'started', 1, '', ARGV[14]) .. '\n')
  index_run(ARGV[2], false, 'running', deadline, exp, ARGV[12], {}, now, {fmt(now), ARGV[4], ARGV[3]})
  return {1, fmt(now), run_fields(KEYS[1])}
end
if status == 'completed' or status == 'failed' or status == 'cancelled'
  or (status == 'queued' and num(st[2]) > now)
  or (status == 'running' and num(st[3]) >= now) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local attempt = num(st[4])
local events = {}
if status == 'running' then
  local lost = 'attempt ' .. fmt(attempt) .. ' lost its lease at ' .. rfc3339(num(st[3]))
  redis.call('HSET', KEYS[1], 'attempts_made', fmt(num(st[5]) + 1), 'last_error', lost)
  table.insert(events, event(now, 'lease_lost', attempt, lost))
end
redis.call('HSET', KEYS[1], 'status', 'running', 'attempt', fmt(attempt + 1), 'attempt_id', ARGV[9],
  'not_before', '', 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
table.insert(events, event(now, 'started', attempt + 1, '', ARGV[14]))
index_run(ARGV[2], status, 'running', deadline, exp, ARGV[12], events, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// renew: ARGV now, id, attempt, attempt_id, lease (µs), retention (µs), grace (ms),
// progress (empty: unchanged), prefix. ExpireAt never moves back: max(old, ExpiryOf).
var renewScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'expire_at', 'not_before')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local deadline = now + tonumber(ARGV[5])
local exp = math.max(num(st[4]), expiry(now, deadline, num(st[5]), tonumber(ARGV[6])))
redis.call('HSET', KEYS[1], 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[8]) end
index_run(ARGV[2], 'running', 'running', deadline, exp, ARGV[7], {}, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// finish (complete, fail): ARGV now, id, attempt, attempt_id, status, error, retention
// (µs), grace (ms), result (empty for none), progress (empty: unchanged), prefix (always
// the last ARGV). ledger.Ledger checked result and progress. A failure's event carries the run's last error (the
// attempt's, or the one before when it gave none), a completion's none.
var finishScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'attempts_made', 'last_error')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local exp = now + tonumber(ARGV[7])
local last = st[5]
if ARGV[6] ~= '' then
  last = ARGV[6]
  redis.call('HSET', KEYS[1], 'last_error', last)
end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[10]) end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'attempts_made', fmt(num(st[4]) + 1), 'deadline', '',
  'not_before', '', 'completed_at', fmt(now), 'updated_at', fmt(now), 'expire_at', fmt(exp))
local text = ''
if ARGV[5] == 'failed' then text = last end
index_run(ARGV[2], 'running', ARGV[5], 0, exp, ARGV[8], {event(now, ARGV[5], tonumber(ARGV[3]), text)}, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// release: ARGV now, id, attempt, attempt_id, error, retry after (µs, ≥ 0), pickup (µs),
// retention (µs), grace (ms), progress (empty: unchanged), prefix.
var releaseScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id', 'attempts_made')
if not held(st, ARGV[3], ARGV[4]) then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local retry = tonumber(ARGV[6])
local nb = ''
if retry > 0 then nb = fmt(now + retry) end
local deadline = now + retry + tonumber(ARGV[7])
local exp = expiry(now, deadline, num(nb), tonumber(ARGV[8]))
redis.call('HSET', KEYS[1], 'status', 'queued', 'attempts_made', fmt(num(st[4]) + 1), 'last_error', ARGV[5],
  'not_before', nb, 'deadline', fmt(deadline), 'updated_at', fmt(now), 'expire_at', fmt(exp))
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[10]) end
index_run(ARGV[2], 'running', 'queued', deadline, exp, ARGV[9],
  {event(now, 'released', tonumber(ARGV[3]), ARGV[5])}, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// rescue: ARGV now, id, status, attempt, deadline (µs), pickup (µs), retention (µs),
// lost-lease error, grace (ms), prefix. A running run's lease is lost (lease_lost), a
// queued one is made due again (rescued).
var rescueScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'deadline', 'attempts_made')
if st[1] ~= ARGV[3] or st[2] ~= ARGV[4] or st[3] ~= ARGV[5]
  or (st[1] ~= 'queued' and st[1] ~= 'running') or num(st[3]) >= now then
  return {0, fmt(now), run_fields(KEYS[1])}
end
local ev = event(now, 'rescued', tonumber(ARGV[4]))
if st[1] == 'running' then
  redis.call('HSET', KEYS[1], 'attempts_made', fmt(num(st[4]) + 1), 'last_error', ARGV[8],
    'attempt_id', '', 'status', 'queued')
  ev = event(now, 'lease_lost', tonumber(ARGV[4]), ARGV[8])
end
local deadline = now + tonumber(ARGV[6])
local exp = expiry(now, deadline, 0, tonumber(ARGV[7]))
redis.call('HSET', KEYS[1], 'not_before', '', 'deadline', fmt(deadline), 'updated_at', fmt(now),
  'expire_at', fmt(exp))
index_run(ARGV[2], st[1], 'queued', deadline, exp, ARGV[9], {ev}, now)
return {1, fmt(now), run_fields(KEYS[1])}
`)

// operate (an operator's retry, cancel or release, decided in Go by the driver's rule):
// ARGV id, the run as read (status, attempt, attempt_id, deadline, not_before,
// attempts_made, updated_at, expire_at: ARGV[2..9]), the run to write (status,
// attempt_id, deadline, not_before, attempts_made, last_error, updated_at, completed_at,
// expire_at: ARGV[10..18]), grace (ms), the number of events n, n events (JSON), prefix.
// It writes only when the run is still as read, and answers {1} when it wrote, {0} when
// the run changed since (the caller reads it again and decides anew).
var operateScript = redis.NewScript(prelude + operateLua + `
if not operate() then return {0} end
return {1}
`)

// operateLua defines operate(), the operate script's compare-and-set of the run: false,
// writing nothing, when the run changed since it was read; else it writes the run, its
// indexes and its events, and returns true.
const operateLua = `
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
`

// resolve (an operator's resolution of an uncertain effect, decided in Go by
// driver.ApplyResolveEffect): KEYS[4] the effect; ARGV as operate's up to its events,
// then at e = 21 + n: the effect's key (without the prefix), the effect as read
// (status, attempt, updated_at: ARGV[e+1..e+3]), the effect to write (status, attempt,
// ref, done_at, updated_at, expire_at: ARGV[e+4..e+9]), prefix. It writes the run and
// the effect only when both are still as read, and answers {1} when it wrote, {0} when
// either changed since.
var resolveScript = redis.NewScript(prelude + operateLua + `
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
`)

// get: KEYS[1] the run; ARGV now. Answers {now, the run's fields with its history}.
var getScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
return {fmt(now), redis.call('HGETALL', KEYS[1])}
`)

// list: KEYS[1] a listing index; ARGV max and min score (ZREVRANGEBYSCORE's), the
// cursor's score and run ID ("" for none: entries at that score with a run ID not below
// it are skipped), how many runs to find, how many entries to read at most, the position
// among the fields of the index's own filter ("" for none) and its value, the position
// of the order's field (created_at or updated_at), the status, job and namespace filters
// ("" for none), the run key prefix, the positions of status, job and namespace, then
// the fields to answer. Answers {runs (each the fields' values), 1 when the index ran
// out, the score and run ID of the last entry read}. An entry whose run is gone, or no
// longer matches the index (an expired run claimed anew), is dropped. The entries
// skipped at the cursor's score do not count as read, so that every call reads past the
// cursor.
var listScript = redis.NewScript(prelude + `
local want, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local pos_s, pos_id = nil, ARGV[4]
if ARGV[3] ~= '' then pos_s = tonumber(ARGV[3]) end
local slot, sort = tonumber(ARGV[7]), tonumber(ARGV[9])
local ps, pj, pn = tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local fields = {}
for i = 17, #ARGV do fields[#fields + 1] = ARGV[i] end
local out, scanned, off, done = {}, 0, 0, 0
local last_s, last_id = '', ''
while #out < want and scanned < budget do
  local n = math.min(budget - scanned, want - #out + 20)
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', off, n)
  if #batch == 0 then
    done = 1
    break
  end
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    local s = tonumber(score)
    if pos_s and s == pos_s and id >= pos_id then
      off = off + 1
    else
      scanned = scanned + 1
      last_s, last_id = score, id
      local f = redis.call('HMGET', ARGV[13] .. id, unpack(fields))
      if not f[ps] or (slot and f[slot] ~= ARGV[8]) or num(f[sort]) ~= s then
        redis.call('ZREM', KEYS[1], id)
      else
        off = off + 1
        if (ARGV[10] == '' or f[ps] == ARGV[10]) and (ARGV[11] == '' or f[pj] == ARGV[11])
          and (ARGV[12] == '' or f[pn] == ARGV[12]) then
          out[#out + 1] = f
          if #out >= want then break end
        end
      end
    end
  end
end
return {out, done, last_s, last_id}
`)

// list_effects: KEYS[1] the run; ARGV the effect key prefix. Answers the fields of each
// effect the run's 'effects' field lists.
// runIDs: KEYS[1] the ID index (P.."list:id"); ARGV the first ID and the one past the
// last (ZRANGEBYLEX's [ and ( bounds), how many IDs to find, how many entries to read
// at most, and the run key prefix. Answers the IDs in the range whose run exists,
// ascending; an entry whose run is gone (its key expired) is dropped.
var runIDsScript = redis.NewScript(`
local want, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, scanned, from = {}, 0, '[' .. ARGV[1]
while #out < want and scanned < budget do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], from, '(' .. ARGV[2], 'LIMIT', 0, math.min(budget - scanned, want - #out + 20))
  if #batch == 0 then break end
  for _, id in ipairs(batch) do
    scanned = scanned + 1
    from = '(' .. id
    if redis.call('EXISTS', ARGV[5] .. id) == 1 then
      out[#out + 1] = id
      if #out >= want then break end
    else
      redis.call('ZREM', KEYS[1], id)
    end
  end
end
return out
`)

var listEffectsScript = redis.NewScript(`
local out = {}
local effects = redis.call('HGET', KEYS[1], 'effects')
if effects then
  for ekey in string.gmatch(effects, '%S+') do
    local h = redis.call('HGETALL', ARGV[1] .. ekey)
    if #h > 0 then out[#out + 1] = h end
  end
end
return out
`)

// begin_effect: KEYS[4] the effect; ARGV now, run id, attempt, attempt_id, name, effect
// key, retention (µs), grace (ms). Answers {written, now, run, effect, previous attempt}.
var beginEffectScript = redis.NewScript(prelude + `
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
`)

// complete_effect: KEYS[4] the effect; ARGV now, run id, attempt, attempt_id, effect key,
// retention (µs), grace (ms), ref. Answers {written, now, run, effect}.
var completeEffectScript = redis.NewScript(prelude + `
local now = now_us(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'attempt_id')
local es = redis.call('HMGET', KEYS[4], 'status', 'attempt')
if not held(st, ARGV[3], ARGV[4]) or es[1] ~= 'pending' or es[2] ~= ARGV[3] then
  return {0, fmt(now), run_fields(KEYS[1]), redis.call('HGETALL', KEYS[4])}
end
local exp = now + tonumber(ARGV[6])
redis.call('HSET', KEYS[4], 'status', 'done', 'done_at', fmt(now), 'updated_at', fmt(now),
  'expire_at', fmt(exp), 'ref', ARGV[8])
keep_effect(KEYS[4], ARGV[5], exp, ARGV[7])
return {1, fmt(now), {}, redis.call('HGETALL', KEYS[4])}
`)

// list_rescue: KEYS[1] the rescue index; ARGV now, limit, run key prefix. Answers
// {now, {run fields, …}} for live runs past their deadline, oldest deadline first; index
// entries whose run is gone are dropped.
var listRescueScript = redis.NewScript(prelude + `
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
`)

// sweep: KEYS[1] the expiry index, KEYS[2] the rescue index; ARGV now, limit, prefix.
// Deletes records past expire_at (at most limit index entries), with a run's listing
// entries, and answers how many records it deleted; entries whose key Redis already
// expired are dropped without counting (an expired run's listing entries with them). An effect goes only once its run is gone: an expired effect of a
// run past its own expire_at goes with the run, and one of a live run is filed again
// under the run's expire_at.
var sweepScript = redis.NewScript(prelude + `
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
`)

// scripts are loaded once when the ledger opens (SCRIPT LOAD) and run with EVALSHA; a
// server that lost its script cache (a restart, a failover) gets them again through EVAL.
var scripts = []*redis.Script{
	claimScript, expediteScript, acquireScript, renewScript, finishScript, releaseScript, rescueScript,
	operateScript, resolveScript, getScript, listScript, listEffectsScript,
	beginEffectScript, completeEffectScript, listRescueScript, sweepScript,
}
