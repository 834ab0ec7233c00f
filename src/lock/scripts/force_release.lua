-- Remove the lock whoever holds it (lockrun release --force): every holder,
-- or only the one whose token is ONLY; what is freed goes to the runs
-- first in line, as after a release.
-- Removing every holder (ONLY is '') also clears the success a --once-per
-- run recorded (DONE), so that the next run runs the job.
-- Returns {removed=how many holders were removed, holders={{fields...}, ...}
-- (the records removed, each with its token), cleared=1 if a recorded
-- success was removed else 0} as name-value pairs, or wrong_type's reply
-- (guard.lua), removing nothing, when a key is not lockrun's.
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
local only = ONLY
local before = front()
drop_expired()
drop_expired_leases()
local removed = {}
local lease = redis.call('GET', LEASE)
if lease and (only == '' or only == lease) then
  local holder = redis.call('HGETALL', HOLDER)
  holder[#holder + 1] = 'token'
  holder[#holder + 1] = lease
  removed[#removed + 1] = holder
  redis.call('DEL', LEASE, HOLDER)
end
local together = redis.call('HGETALL', HOLDERS)
for i = 1, #together, 2 do
  local id = together[i]
  if only == '' or only == id then
    removed[#removed + 1] = holder_fields(id, together[i + 1])
    redis.call('ZREM', LEASES, id)
    redis.call('HDEL', HOLDERS, id)
  end
end
expire_leases()
local cleared = 0
if only == '' then
  cleared = redis.call('DEL', DONE)
end
admit(nil)
announce(before, nil)
return {'removed', #removed, 'holders', removed, 'cleared', cleared}
