-- list: KEYS[1] a listing index; ARGV max and min score (ZREVRANGEBYSCORE's), the
-- cursor's score and run ID ("" for none: entries at that score with a run ID not below
-- it are skipped), how many runs to find, how many entries to read at most, the position
-- among the fields of the index's own filter ("" for none) and its value, the position
-- of the order's field (created_at or updated_at), the status, job and namespace filters
-- ("" for none), the run key prefix, the positions of status, job and namespace, then
-- the fields to answer. Answers {runs (each the fields' values), 1 when the index ran
-- out, the score and run ID of the last entry read}. An entry whose run is gone, or no
-- longer matches the index (an expired run claimed anew), is dropped. The entries
-- skipped at the cursor's score do not count as read, so that every call reads past the
-- cursor.

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
