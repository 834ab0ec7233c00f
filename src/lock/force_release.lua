-- Remove the lock whoever holds it (lockrun release --force); it goes to the
-- first waiter, as after a release.
-- KEYS as in queue.lua
-- Also clears the success a --once-per run recorded (KEYS[8]), so that the
-- next run runs the job.
-- Returns {removed=1 if a lock was removed else 0, holder={fields...},
-- cleared=1 if a recorded success was removed else 0} as name-value pairs, or
-- wrong_type's reply (guard.lua), removing nothing, when a key is not
-- lockrun's.
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
local before = front()
drop_expired()
local holder = redis.call('HGETALL', HOLDER)
local removed = redis.call('DEL', LEASE)
redis.call('DEL', HOLDER)
local cleared = redis.call('DEL', DONE)
if removed == 1 then
  hand_off()
end
announce(before, nil)
return {'removed', removed, 'holder', holder, 'cleared', cleared}
