-- The wait queue of one lock. build.rs puts this file (after guard.lua) in
-- front of every script that reads or changes the queue, so that they all
-- agree on one layout and one set of rules.
-- KEYS[1] lease  KEYS[2] holder record  KEYS[3] fence counter
-- KEYS[4] queue: waiter id -> arrival (server time in us, strictly increasing)
-- KEYS[5] places: waiter id -> when its place runs out (server time in ms)
-- KEYS[6] waiters: waiter id -> its record (JSON), or why it was taken out
-- KEYS[7] supersedable: waiter id -> arrival, for waiters that gave --supersede
-- KEYS[8] done: the last success of a --once-per run (a hash), until its
--         period ends (PEXPIREAT)
-- A waiter's id is its run's lock token, so a lease handed over is already
-- the waiter's. Each waiter listens on the channel KEYS[1]:wake:<id>: a
-- channel is not a key, so one per waiter keeps every script within its KEYS.
-- Every call does O(log N) work in the queue length N, plus O(1) for each
-- entry it removes (each entry is removed once).
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
local LEASE, HOLDER, FENCE = KEYS[1], KEYS[2], KEYS[3]
local QUEUE, PLACES, WAITERS, SUPERSEDABLE = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local DONE = KEYS[8]
-- The type lockrun keeps in each key, for guard.lua's wrong_type: a script
-- stops before it touches any of them while one holds someone else's data.
local OURS = {{LEASE, 'string'}, {HOLDER, 'hash'}, {FENCE, 'string'}, {QUEUE, 'zset'},
  {PLACES, 'zset'}, {WAITERS, 'hash'}, {SUPERSEDABLE, 'zset'}, {DONE, 'hash'}}

local now_us, now_ms
do
  local now = redis.call('TIME')
  now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  now_ms = math.floor(now_us / 1000)
end

-- Lua's own number formatting switches to exponents past 14 digits.
local function int(n)
  return string.format('%d', n)
end

local function channel(id)
  return LEASE .. ':wake:' .. id
end

local function forget(id)
  redis.call('ZREM', QUEUE, id)
  redis.call('ZREM', PLACES, id)
  redis.call('ZREM', SUPERSEDABLE, id)
  redis.call('HDEL', WAITERS, id)
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

-- Gives the lease to `id` and hands out the next fencing token.
local function grant(id, ttl, host, pid, command)
  redis.call('SET', LEASE, id, 'PX', ttl)
  -- A token is at least the server clock in microseconds and always above
  -- the last one stored, so it keeps growing even after Redis lost every key.
  local fence = int(math.max((tonumber(redis.call('GET', FENCE)) or 0) + 1, now_us))
  redis.call('SET', FENCE, fence)
  redis.call('DEL', HOLDER)
  redis.call('HSET', HOLDER, 'host', host, 'pid', pid, 'command', command,
    'acquired_us', int(now_us), 'fence', fence)
  redis.call('PEXPIRE', HOLDER, ttl)
  forget(id)
  return fence
end

-- Tells the first waiter that it is first, and how long the lease it waits
-- for has left (-2: free now), so that it notices a holder that dies
-- without releasing: only the first waiter needs to know, and only when it
-- would not look in time anyway: when the lease is free, or runs out before
-- the waiter's next refresh of its place. Skipped when that waiter was
-- first already before this call (`before`: it knows) or is the caller
-- (`except`: the reply tells it).
local function announce(before, except)
  local id = first_waiter()
  if not id or id == before or id == except then
    return
  end
  local pttl = redis.call('PTTL', LEASE)
  local record = redis.call('HGET', WAITERS, id)
  local refresh = record and tonumber(cjson.decode(record).refresh)
  if pttl == -2 or (pttl >= 0 and not (refresh and refresh <= pttl)) then
    redis.call('PUBLISH', channel(id), 'first ' .. pttl)
  end
end

-- The lease, just freed, goes straight to the first live waiter: its wake-up
-- message carries the fencing token, so it starts without another call. A
-- waiter that said it listens but that nobody listens for has died (its
-- process ended and the kernel closed its sockets): it is skipped before
-- anything is granted, for a grant once announced is never taken back. A
-- waiter listens on the server that runs this script: the one server, the
-- primary, or the cluster node that owns the lock's slot.
local function hand_off()
  while true do
    local id = first_waiter()
    if not id then
      return
    end
    local record = redis.call('HGET', WAITERS, id)
    local waiter = record and cjson.decode(record)
    if waiter and waiter.listening
        and redis.call('PUBSUB', 'NUMSUB', channel(id))[2] == 0 then
      waiter = nil
    end
    if waiter then
      local fence = grant(id, waiter.ttl, waiter.host, waiter.pid, waiter.command)
      -- One that is not listening yet (it polls) finds the lease its own
      -- at its next attempt.
      redis.call('PUBLISH', channel(id), 'granted ' .. fence)
      return
    end
    forget(id)
  end
end
