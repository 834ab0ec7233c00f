--! script after guard.lua steps.lua queue.lua
-- Give the lock up, or keep it for --min-hold, but only while it still holds
-- our token; a lock given up goes straight to the first waiter. Takes the
-- caller out of line too: a run that stops waiting (a signal, --wait ran
-- out) gives back whatever it may have got meanwhile.
-- The arguments: `ReleaseArgs` in src/lock/protocol.rs. A success of a
-- --once-per run (PERIOD_MS above 0) is recorded in DONE until that long
-- after the lease was granted (the holder record's acquired_us), on this
-- server's clock.
-- Returns {outcome='deleted'}, {outcome='kept'} (for KEEP_MS) or
-- {outcome='not_ours'}, as name-value pairs.
-- A run holding the lock together (--slots, --shared) gives up its own lease
-- in LEASES; the places it frees go to the runs first in line.
local me = TOKEN
local keep = tonumber(KEEP_MS)
-- Whether anyone waits or holds the lock together (any of CROWD exists):
-- when nobody does, there is no line to keep in order or to hand the lock
-- to.
local crowded = redis.call('EXISTS', unpack(CROWD)) > 0
local wrong = wrong_type(crowded and OURS or ALONE)
-- A key of another type in the lease's place (GET would fail on it) is not
-- our token. Both lists check the lease first, so it is the one named if
-- it is wrong at all.
local ours = not (wrong and wrong[4] == LEASE) and redis.call('GET', LEASE) == me
if wrong then
  -- Another of the lock's keys holds someone else's data (guard.lua): only
  -- our own lease, and a holder record that is one, are given up; the line
  -- is left as it is.
  if not ours then
    return {'outcome', 'not_ours'}
  end
  local holder = redis.call('TYPE', HOLDER).ok == 'hash'
  if keep > 0 then
    redis.call('PEXPIRE', LEASE, keep)
    if holder then
      redis.call('HSET', HOLDER, 'finished_us', int(now_us))
      redis.call('PEXPIRE', HOLDER, keep)
    end
    return {'outcome', 'kept'}
  end
  redis.call('DEL', LEASE)
  if holder then
    redis.call('DEL', HOLDER)
  end
  return {'outcome', 'deleted'}
end
local before
if crowded then
  before = front()
  -- Only a run with a waiter record can be in line (queue.lua's `join`):
  -- one call instead of four for a holder that never waited.
  if redis.call('HGET', WAITERS, me) then
    forget(me)
  end
  drop_expired()
  drop_expired_leases()
end
if not ours then
  if not crowded then
    return {'outcome', 'not_ours'}
  end
  local record = redis.call('HGET', HOLDERS, me)
  local held_together = record and redis.call('ZSCORE', LEASES, me)
  if held_together then
    if keep > 0 then
      local held = cjson.decode(record)
      held.finished_us = int(now_us)
      redis.call('HSET', HOLDERS, me, cjson.encode(held))
      redis.call('ZADD', LEASES, int(now_ms + keep), me)
      expire_leases()
      announce(nil, me)
      return {'outcome', 'kept'}
    end
    redis.call('ZREM', LEASES, me)
    redis.call('HDEL', HOLDERS, me)
    expire_leases()
  end
  -- Whatever this run leaves (a lease held together, a place first in
  -- line) may let the runs now first in line in.
  admit(nil)
  announce(before, me)
  if held_together then
    return {'outcome', 'deleted'}
  end
  return {'outcome', 'not_ours'}
end
-- Only while the lease is ours: a run that lost it records nothing.
local period = tonumber(PERIOD_MS) or 0
local acquired_us = period > 0 and tonumber(redis.call('HGET', HOLDER, 'acquired_us'))
if acquired_us then
  local until_ms = math.floor(acquired_us / 1000) + period
  if until_ms > now_ms then
    local function held(field)
      return redis.call('HGET', HOLDER, field) or ''
    end
    redis.call('DEL', DONE)
    redis.call('HSET', DONE, 'host', held('host'), 'pid', held('pid'), 'command', held('command'),
      'acquired_us', int(acquired_us), 'fence', held('fence'), 'until', int(until_ms))
    redis.call('PEXPIREAT', DONE, int(until_ms))
  end
end
if keep > 0 then
  -- The command is done: status and busy runs say so instead of pointing
  -- at a process that no longer exists.
  redis.call('HSET', HOLDER, 'finished_us', int(now_us))
  redis.call('PEXPIRE', LEASE, keep)
  redis.call('PEXPIRE', HOLDER, keep)
  if crowded then
    -- The first waiter's idea of when the lease runs out is wrong now.
    announce(nil, me)
  end
  return {'outcome', 'kept'}
end
redis.call('DEL', LEASE, HOLDER)
if crowded then
  admit(nil)
  announce(before, me)
end
return {'outcome', 'deleted'}
