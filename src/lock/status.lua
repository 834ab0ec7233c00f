-- Read the lock's state in one consistent view.
-- KEYS[1] lock  KEYS[2] holder record  KEYS[3] fence counter
-- Returns {pttl, holder fields, server seconds, server microseconds, last fence},
-- or wrong_type's reply (guard.lua) when a key is not lockrun's.
local wrong = wrong_type({{KEYS[1], 'string'}, {KEYS[2], 'hash'}, {KEYS[3], 'string'}})
if wrong then
  return wrong
end
local now = redis.call('TIME')
return {redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[2]), now[1], now[2],
  redis.call('GET', KEYS[3]) or ''}
