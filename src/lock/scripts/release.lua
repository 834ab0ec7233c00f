-- Give the lock up, or keep it for --min-hold, but only while it still holds
-- our token; a lock given up goes straight to the first waiter. Takes the
-- caller out of line too: a run that stops waiting (a signal, --wait ran
-- out) gives back whatever it may have got meanwhile.
-- The arguments: `ReleaseArgs` in release.rs. A success of a
-- --once-per run (PERIOD_MS above 0) is recorded in DONE until that long
-- after the lease was granted (the holder record's acquired_us), on this
-- server's clock.
-- Returns {outcome='deleted'}, {outcome='kept'} (for KEEP_MS) or
-- {outcome='not_ours'}, as name-value pairs.
-- A run that started its command (RECORD not empty) is recorded in HISTORY
-- whatever the release finds, a lost lease included, in this same call: no
-- extra round trip, and no record of a release that did not happen.
-- A run holding the lock together (--slots, --shared) gives up its own lease
-- in LEASES; the places it frees go to the runs first in line.
local me = TOKEN
local keep = tonumber(KEEP_MS)
-- Whether anyone waits or holds the lock together (any of CROWD exists):
-- when nobody does, there is no line to keep in order or to hand the lock
-- to.
local crowded = redis.call('EXISTS', unpack(CROWD)) > 0
local wrong = wrong_type(crowded and OURS or ALONE)
-- Puts this run's record at the head of HISTORY, keeping the last
-- KEEP_RUNS runs: what the run sent, when it ended on this server's clock, and what
-- the release found ('released', 'kept', 'lost', or 'superseded' when a
-- later fencing token was handed out since). Built as text, for cjson
-- writes numbers past 14 digits with exponents.
local function remember(found)
  local keep_runs = tonumber(KEEP_RUNS) or 0
  if RECORD == '' or keep_runs < 1 or (wrong and wrong[4] == HISTORY) then
    return
  end
  redis.call('LPUSH', HISTORY, '{"ended_us":' .. int(now_us) .. ',"release":"' .. found
    .. '","run":' .. RECORD .. '}')
  redis.call('LTRIM', HISTORY, 0, keep_runs - 1)
end
-- A lease no longer ours: lost, or superseded when the fence counter moved
-- past this run's token (another run got the lock since). Runs holding it
-- together (a slot, --shared: the record says so) take later tokens beside
-- each other, so theirs is only lost.
local function gone()
  if RECORD == '' then
    return 'lost'
  end
  local run = cjson.decode(RECORD)
  if run.slot ~= nil or run.shared then
    return 'lost'
  end
  local fence = tonumber(redis.call('GET', FENCE))
  if fence and fence > tonumber(run.fence) then
    return 'superseded'
  end
  return 'lost'
end
-- A key of another type in the lease's place (GET would fail on it) is not
-- our token. Both lists check the lease first, so it is the one named if
-- it is wrong at all.
local ours = not (wrong and wrong[4] == LEASE) and redis.call('GET', LEASE) == me
if wrong then
  -- Another of the lock's keys holds someone else's data (guard.lua): only
  -- our own lease, and a holder record that is one, are given up; the line
  -- is left as it is.
  if not ours then
    remember('lost')
    return {'outcome', 'not_ours'}
  end
  local holder = redis.call('TYPE', HOLDER).ok == 'hash'
  if keep > 0 then
    redis.call('PEXPIRE', LEASE, keep)
    if holder then
      redis.call('HSET', HOLDER, 'finished_us', int(now_us))
      redis.call('PEXPIRE', HOLDER, keep)
    end
    remember('kept')
    return {'outcome', 'kept'}
  end
  redis.call('DEL', LEASE)
  if holder then
    redis.call('DEL', HOLDER)
  end
  remember('released')
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
    remember(gone())
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
      remember('kept')
      announce(nil, me)
      return {'outcome', 'kept'}
    end
    redis.call('ZREM', LEASES, me)
    redis.call('HDEL', HOLDERS, me)
    expire_leases()
  end
  -- Before the announcements: a refused PUBLISH ends the script there.
  remember(held_together and 'released' or gone())
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
  remember('kept')
  if crowded then
    -- The first waiter's idea of when the lease runs out is wrong now.
    announce(nil, me)
  end
  return {'outcome', 'kept'}
end
redis.call('DEL', LEASE, HOLDER)
remember('released')
if crowded then
  admit(nil)
  announce(before, me)
end
return {'outcome', 'deleted'}
