-- The steps that the scripts of a whole lock (queue.lua's) and one_key.lua
-- (one key at a time, while the lock's cluster slot is being migrated)
-- both take, written once. Each names the key it works on, for one_key.lua
-- has only KEY. Put in front of queue.lua, of one_key.lua and of
-- renew_together.lua.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
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

-- The channel on which the waiting run `id` is told about the lock whose
-- lease is at `lease`.
local function wake_channel(lease, id)
  return lease .. WAKE .. id
end

-- The next fencing token, kept at `fence`: at least the server clock in
-- microseconds and always above the last one stored, so it keeps growing
-- even after Redis lost every key. One counter for every holder of the
-- lock, whatever its slot, so tokens grow in the order of the grants.
local function next_fence(fence)
  local next = int(math.max((tonumber(redis.call('GET', fence)) or 0) + 1, now_us))
  redis.call('SET', fence, next)
  return next
end

-- The holder record, at `holder`, of `run` (host, pid, command, ttl)
-- holding the lock alone with fencing token `fence`; it expires with the
-- lease.
local function write_holder(holder, run, fence)
  redis.call('DEL', holder)
  redis.call('HSET', holder, 'host', run.host, 'pid', run.pid, 'command', run.command,
    'acquired_us', int(now_us), 'fence', fence)
  redis.call('PEXPIRE', holder, run.ttl)
end

-- Takes `id` out of `key`, one of the line's keys, which `holds` a sorted
-- set (QUEUE, PLACES, SUPERSEDABLE) or a hash (WAITERS, the records).
local function leave(key, holds, id)
  if holds == 'hash' then
    redis.call('HDEL', key, id)
  else
    redis.call('ZREM', key, id)
  end
end

-- Tells the waiting run `id` that the lock at `lease` is its own now, with
-- its fencing token (and slot, for one of N slots): sent in the call that
-- hands it over (PUBLISH reaches every node of a cluster), so that the
-- waiter starts without another call.
local function tell_granted(lease, id, fence, slot)
  local message = 'granted ' .. fence
  if slot then
    message = message .. ' ' .. slot
  end
  redis.call('PUBLISH', wake_channel(lease, id), message)
end
