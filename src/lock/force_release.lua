-- Remove the lock whoever holds it (lockrun release --force).
-- KEYS[1] lock  KEYS[2] holder record   ARGV[1] release channel
-- Returns {1 if a lock was removed else 0, holder fields...}, or wrong_type's
-- reply (guard.lua), removing nothing, when a key is not lockrun's.
local wrong = wrong_type({{KEYS[1], 'string'}, {KEYS[2], 'hash'}})
if wrong then
  return wrong
end
local holder = redis.call('HGETALL', KEYS[2])
local removed = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
if removed == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
end
return {removed, holder}
