-- Quorum mode, the second phase of fencing: raises the fence counter to at
-- least ARGV[2], the token the run took from the highest of its majority's
-- counters, so that the next majority, which shares a member with this one,
-- hands out a higher token; where the lease is still ours (ARGV[1]), the
-- holder record shows that token too.
-- KEYS as in queue.lua
-- Returns {fence=the counter after the raise} as name-value pairs, or wrong_type's reply (guard.lua),
-- changing nothing, when a key is not lockrun's.
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
local fence = math.max(tonumber(redis.call('GET', FENCE)) or 0, tonumber(ARGV[2]))
redis.call('SET', FENCE, int(fence))
local ours = redis.call('GET', LEASE) == ARGV[1]
if ours and redis.call('EXISTS', HOLDER) == 1 then
  redis.call('HSET', HOLDER, 'fence', ARGV[2])
end
return {'fence', int(fence)}
