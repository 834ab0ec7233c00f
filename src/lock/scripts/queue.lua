-- The wait queue of one lock. Put (after guard.lua and steps.lua) in
-- front of every script that reads or changes the queue, so that they all
-- agree on one layout and one set of rules.
-- The lock's keys (LEASE ... HOLDERS), OURS, ALONE, CROWD and WAKE are
-- declared in src/lock/keys.rs, which says what each key holds.
-- Runs of one lock agree on their number of slots while any holds or waits
-- (acquire.lua), so the holders together are all --shared runs or all runs
-- of N slots.
-- A waiter's id is its run's lock token, so a lease handed over is already
-- the waiter's, and it listens on its own channel (`channel`).
-- Every call does O(log N) work in the queue length N, plus O(1) for each
-- entry it removes (each entry is removed once).
local function channel(id)
  return wake_channel(LEASE, id)
end

-- The id of the cluster node running this script, asked once; false where
-- it cannot be asked (not a cluster, or an ACL without +cluster|myid).
local this_node
local function here()
  if this_node == nil then
    local id = redis.pcall('CLUSTER', 'MYID')
    this_node = type(id) == 'string' and id
  end
  return this_node
end

-- Whether PUBSUB NUMSUB on this node counts the subscription of a waiter
-- that listens. In a cluster a waiter subscribes on the node that owns the
-- lock's slot, and records that node's id; a resharding may have moved the
-- slot here since. Such a waiter still hears what is published here (a
-- cluster passes PUBLISH to every node), and follows the slot at its next
-- refresh; until then nothing here tells whether it lives.
local function heard_here(waiter)
  return (waiter.node or '') == '' or waiter.node == here()
end

-- Takes `id` out of line. A waiter's record goes with its last trace
-- (`join` writes it with the place): a run without one is in none of these
-- keys, which release.lua relies on. The one-key path leaves them in this
-- order too, a call each (one_key.rs, `leave_line`).
local function forget(id)
  for _, key in ipairs({QUEUE, PLACES, SUPERSEDABLE}) do
    leave(key, 'zset', id)
  end
  leave(WAITERS, 'hash', id)
end

-- A place whose time ran out belongs to a run that stopped refreshing it:
-- dead, or cut off from Redis. A few go per call, so that no call does O(N)
-- work; `first_waiter` checks the front itself, which is all the order needs.
local function drop_expired()
  local gone = redis.call('ZRANGEBYSCORE', PLACES, '-inf', '(' .. int(now_ms), 'LIMIT', 0, 16)
  for _, id in ipairs(gone) do
    forget(id)
  end
end

-- The front of the queue before this call changed anything.
local function front()
  return redis.call('ZRANGE', QUEUE, 0, 0)[1]
end

-- The first waiter whose place is still live, and when that place runs out.
local function first_waiter()
  while true do
    local id = front()
    if not id then
      return nil
    end
    local deadline = tonumber(redis.call('ZSCORE', PLACES, id))
    if deadline and deadline >= now_ms then
      return id, deadline
    end
    forget(id)
  end
end

-- How a run asks to hold the lock: `run` is its waiter record, or the
-- caller's arguments; slots 1 and not shared is alone.
local function together(run)
  return run.shared or run.slots > 1
end

-- A waiter's record as a run to admit.
local function run_of(waiter)
  return {ttl = waiter.ttl, host = waiter.host, pid = waiter.pid, command = waiter.command,
    slots = tonumber(waiter.slots) or 1, shared = waiter.shared == true}
end

-- Whether `run` may hold the lock now, beside whoever holds it: a run alone
-- when nobody does, a --shared run when nobody holds it alone, one of N
-- slots while fewer than N hold it.
local function admissible(run)
  if redis.call('GET', LEASE) then
    return false
  end
  if run.shared then
    return true
  end
  return redis.call('ZCARD', LEASES) < run.slots
end

-- The leases held together expire with the latest of them: holders that
-- all died leave nothing behind.
local function expire_leases()
  local latest = redis.call('ZRANGE', LEASES, -1, -1, 'WITHSCORES')[2]
  if latest then
    redis.call('PEXPIREAT', LEASES, latest)
    redis.call('PEXPIREAT', HOLDERS, latest)
  end
end

-- Leases held together whose time ran out: their holders stopped renewing
-- (dead, or cut off from Redis). Returns whether any went, freeing places.
local function drop_expired_leases()
  local gone = redis.call('ZRANGEBYSCORE', LEASES, '-inf', '(' .. int(now_ms))
  for _, id in ipairs(gone) do
    redis.call('ZREM', LEASES, id)
    redis.call('HDEL', HOLDERS, id)
  end
  return #gone > 0
end

-- The lowest slot of `slots` that no holder has.
local function free_slot(slots)
  local taken = {}
  local records = redis.call('HGETALL', HOLDERS)
  for i = 2, #records, 2 do
    local slot = cjson.decode(records[i]).slot
    if slot then
      taken[slot] = true
    end
  end
  for slot = 0, slots - 1 do
    if not taken[slot] then
      return slot
    end
  end
  return nil
end

-- Gives `id` a lease and the next fencing token; returns the token and, for
-- one of N slots, its slot. `grant` is for a run that may be in line.
local function hold(id, run)
  local fence = next_fence(FENCE)
  if together(run) then
    local slot = nil
    if not run.shared then
      slot = free_slot(run.slots)
    end
    redis.call('ZADD', LEASES, int(now_ms + tonumber(run.ttl)), id)
    redis.call('HSET', HOLDERS, id, cjson.encode({host = run.host, pid = run.pid,
      command = run.command, acquired_us = int(now_us), fence = fence, slot = slot,
      slots = run.slots, shared = run.shared}))
    expire_leases()
    return fence, slot
  end
  redis.call('SET', LEASE, id, 'PX', run.ttl)
  write_holder(HOLDER, run, fence)
  return fence, nil
end

-- Takes `id` out of line and gives it the lock (`hold`).
local function grant(id, run)
  forget(id)
  return hold(id, run)
end

-- A record of a run holding the lock together, as the name-value fields of
-- a holder record (HOLDER), with its token and slot.
local function holder_fields(id, record)
  local held = cjson.decode(record)
  local fields = {'token', id, 'shared', held.shared and '1' or '0'}
  for _, name in ipairs({'host', 'pid', 'command', 'acquired_us', 'fence', 'slot', 'slots',
      'finished_us'}) do
    if held[name] ~= nil then
      fields[#fields + 1] = name
      fields[#fields + 1] = tostring(held[name])
    end
  end
  return fields
end

-- How long until the lock may free up without a release: the lease of a run
-- holding it alone, else the soonest of the leases held together; -2 when
-- nobody holds it.
local function time_left()
  local pttl = redis.call('PTTL', LEASE)
  if pttl ~= -2 then
    return pttl
  end
  local soonest = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')[2]
  if soonest then
    return math.max(tonumber(soonest) - now_ms, 0)
  end
  return -2
end

-- Tells the first waiter that it is first, and how long the lock it waits
-- for may stay taken (-2: free now, or free for it), so that it notices a
-- holder that dies without releasing: only the first waiter needs to know,
-- and only when it would not look in time anyway: when the lock is free,
-- or may free up before the waiter's next refresh of its place. Skipped
-- when that waiter was first already before this call (`before`: it knows)
-- or is the caller (`except`: the reply tells it).
local function announce(before, except)
  local id = first_waiter()
  if not id or id == before or id == except then
    return
  end
  local record = redis.call('HGET', WAITERS, id)
  local waiter = record and cjson.decode(record)
  local pttl = time_left()
  if waiter and pttl ~= -2 and admissible(run_of(waiter)) then
    pttl = -2
  end
  local refresh = waiter and tonumber(waiter.refresh)
  if pttl == -2 or (pttl >= 0 and not (refresh and refresh <= pttl)) then
    redis.call('PUBLISH', channel(id), 'first ' .. pttl)
  end
end

-- The lock, as far as it is free, goes straight to the runs first in line,
-- in order: the first, and after it each next one that may hold it beside
-- those (a place freed for one of N slots, a group of --shared runs), until
-- one must wait; never past `stop` (the caller, whom its reply tells). Each
-- is told on its own channel, with its fencing token (and slot), so it
-- starts without another call. A waiter that said it listens but that
-- nobody listens for has died (its process ended and the kernel closed its
-- sockets): it is skipped before anything is granted, for a grant once
-- announced is never taken back. A waiter listens on the server that runs
-- this script: the one server, the primary, or the cluster node that owns
-- the lock's slot (`heard_here`).
local function admit(stop)
  while true do
    local id = first_waiter()
    if not id or id == stop then
      return
    end
    local record = redis.call('HGET', WAITERS, id)
    local waiter = record and cjson.decode(record)
    local run = waiter and run_of(waiter)
    if run and not admissible(run) then
      return
    end
    if waiter and waiter.listening and heard_here(waiter)
        and redis.call('PUBSUB', 'NUMSUB', channel(id))[2] == 0 then
      run = nil
    end
    if run then
      local fence, slot = grant(id, run)
      -- One that is not listening yet (it polls) finds the lease its own
      -- at its next attempt.
      tell_granted(LEASE, id, fence, slot)
      if not together(run) then
        return
      end
    else
      forget(id)
    end
  end
end
