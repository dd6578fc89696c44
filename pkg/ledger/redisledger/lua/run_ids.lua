-- run_ids: KEYS[1] the ID index (P.."list:id"); ARGV the first ID and the one past the
-- last (ZRANGEBYLEX's [ and ( bounds), how many IDs to find, how many entries to read
-- at most, and the run key prefix. Answers the IDs in the range whose run exists,
-- ascending; an entry whose run is gone (its key expired) is dropped.

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
