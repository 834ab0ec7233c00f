-- Take the lock if it is free, and hand out the next fencing token.
-- KEYS[1] lock  KEYS[2] fence counter  KEYS[3] holder record
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] host  ARGV[4] pid  ARGV[5] command
-- Returns {1, fence, {}} when acquired, {0, pttl, {holder fields...}} when busy,
-- and wrong_type's reply (guard.lua) when a key is not lockrun's, unchanged.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
local wrong = wrong_type({{KEYS[1], 'string'}, {KEYS[2], 'string'}, {KEYS[3], 'hash'}})
if wrong then
  return wrong
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[3])}
end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
-- A token is at least the server clock in microseconds and always above the
-- last one stored, so it keeps growing even after Redis lost every key.
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now_us)
local fence_text = string.format('%d', fence)
redis.call('SET', KEYS[2], fence_text)
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'host', ARGV[3], 'pid', ARGV[4], 'command', ARGV[5],
  'acquired_us', string.format('%d', now_us), 'fence', fence_text)
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, fence_text, {}}
