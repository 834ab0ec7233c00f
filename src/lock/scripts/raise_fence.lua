-- Quorum mode, the second phase of fencing: raises the fence counter to at
-- least AT_LEAST, the token the run took from the highest of its majority's
-- counters, so that the next majority, which shares a member with this one,
-- hands out a higher token; where the lease is still ours (TOKEN), the
-- holder record shows that token too.
-- Returns {fence=the counter after the raise} as name-value pairs, or wrong_type's reply (guard.lua),
-- changing nothing, when a key is not lockrun's.
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
local fence = math.max(tonumber(redis.call('GET', FENCE)) or 0, tonumber(AT_LEAST))
redis.call('SET', FENCE, int(fence))
local ours = redis.call('GET', LEASE) == TOKEN
if ours and redis.call('EXISTS', HOLDER) == 1 then
  redis.call('HSET', HOLDER, 'fence', AT_LEAST)
end
return {'fence', int(fence)}
