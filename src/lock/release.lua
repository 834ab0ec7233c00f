-- Give the lock up, or keep it for --min-hold, but only while it still holds
-- our token; a lock given up goes straight to the first waiter. Takes the
-- caller out of line too: a run that stops waiting (a signal, --wait ran
-- out) gives back whatever it may have got meanwhile.
-- KEYS as in queue.lua
-- ARGV[1] token  ARGV[2] ms to keep it (0: release now)
-- Returns 1 when released, 2 when kept for ARGV[2] ms, 0 when not ours.
local me = ARGV[1]
local before = front()
forget(me)
drop_expired()
if redis.call('GET', LEASE) ~= me then
  announce(before, me)
  return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  -- The command is done: status and busy runs say so instead of pointing
  -- at a process that no longer exists.
  redis.call('HSET', HOLDER, 'finished_us', int(now_us))
  redis.call('PEXPIRE', LEASE, keep)
  redis.call('PEXPIRE', HOLDER, keep)
  -- The first waiter's idea of when the lease runs out is wrong now.
  announce(nil, me)
  return 2
end
redis.call('DEL', LEASE, HOLDER)
hand_off()
announce(before, me)
return 1
