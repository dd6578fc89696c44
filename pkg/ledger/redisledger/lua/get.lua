-- get: KEYS[1] the run; ARGV now. Answers {now, the run's fields with its history}.

local now = now_us(ARGV[1])
return {fmt(now), redis.call('HGETALL', KEYS[1])}
