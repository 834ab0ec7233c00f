--! script after replicas.lua
-- One key of a lock whose cluster slot is being migrated (docs/design.md, "A
-- slot being migrated"). Its keys may then be split between the source and
-- the target node, and a script that names several of them is refused with
-- TRYAGAIN wherever they are not all present. Each call of this script names
-- one key and touches nothing else, so that it runs wherever that key is:
-- on the source while the key is still there, otherwise (ASK) on the
-- target, where a key created during the migration belongs anyway.
-- The arguments: `OneKeyArgs` in src/lock/protocol.rs; the operations, each
-- with its OPERANDS:
--   lease_take token ttl   lease_renew token ttl   lease_release token keep_ms
--   lease_get              lease_remove            fence_next   fence_get
--   holder_get             holder_remove           holder_drop fence
--   holder_set host pid command fence ttl          holder_renew fence ttl
--   holder_finish fence keep_ms
--   holder_pass fence host pid command new_fence ttl
--   lease_pass token to ttl channel message
--   line_front count       line_drop id           line_keep ttl
--   place_get id           place_refresh id ttl   waiter_get id
--   waiter_drop id
-- Returns name-value pairs: kind (what was found or done), node (the id of
-- the node that ran it, or ''), replicas (connected and online, for WAIT),
-- now_us (server time), and pttl, fence, holder, ids, waiting, deadline or
-- record where the operation reads one; or guard.lua's wrongtype reply, changing nothing, when the key holds
-- another type.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
local holds = redis.call('TYPE', KEY).ok
if holds ~= 'none' and holds ~= HOLDS then
  return {'kind', 'wrongtype', 'key', KEY, 'holds', holds}
end

local function int(n)
  return string.format('%d', n)
end

local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- Called after the writes, for online_replicas.
local function reply(kind, ...)
  local replicas = online_replicas()
  local node = ''
  if NAME_NODE == '1' then
    node = redis.call('CLUSTER', 'MYID')
  end
  return {'kind', kind, 'node', node, 'replicas', replicas, 'now_us', int(now_us()), ...}
end

local lease_ops = {
  lease_take = function(token, ttl)
    local value = redis.call('GET', KEY)
    if value == token then
      redis.call('PEXPIRE', KEY, ttl)
      return reply('mine')
    elseif value then
      return reply('busy', 'pttl', redis.call('PTTL', KEY))
    end
    redis.call('SET', KEY, token, 'PX', ttl)
    return reply('taken')
  end,
  lease_renew = function(token, ttl)
    if redis.call('GET', KEY) ~= token then
      return reply('gone')
    end
    redis.call('PEXPIRE', KEY, ttl)
    return reply('mine')
  end,
  lease_release = function(token, keep)
    if redis.call('GET', KEY) ~= token then
      return reply('gone')
    elseif tonumber(keep) > 0 then
      redis.call('PEXPIRE', KEY, keep)
      return reply('kept')
    end
    redis.call('DEL', KEY)
    return reply('deleted')
  end,
  -- A release's hand-over to the first waiter `to`, whose id is its
  -- token: the lease changes hands in one step, and the waiter is told
  -- with it (PUBLISH reaches every node of a cluster).
  lease_pass = function(token, to, ttl, channel, message)
    if redis.call('GET', KEY) ~= token then
      return reply('gone')
    end
    redis.call('SET', KEY, to, 'PX', ttl)
    redis.call('PUBLISH', channel, message)
    return reply('passed')
  end,
  lease_get = function()
    return reply('found', 'pttl', redis.call('PTTL', KEY))
  end,
  -- release --force: whoever holds it.
  lease_remove = function()
    if redis.call('DEL', KEY) == 0 then
      return reply('gone')
    end
    return reply('deleted')
  end,
}

-- A token is at least the server clock in microseconds, as queue.lua's
-- grant hands them out.
local fence_ops = {
  fence_next = function()
    local fence = int(math.max((tonumber(redis.call('GET', KEY)) or 0) + 1, now_us()))
    redis.call('SET', KEY, fence)
    return reply('next', 'fence', fence)
  end,
  fence_get = function()
    return reply('found', 'fence', redis.call('GET', KEY) or '')
  end,
}

local function set_holder(host, pid, command, fence, ttl)
  redis.call('DEL', KEY)
  redis.call('HSET', KEY, 'host', host, 'pid', pid, 'command', command,
    'acquired_us', int(now_us()), 'fence', fence)
  redis.call('PEXPIRE', KEY, ttl)
  return reply('set')
end

-- The holder record is changed only while it is this run's, told by its
-- fencing token: the lease is in another call, perhaps on another node.
local holder_ops = {
  holder_get = function()
    return reply('found', 'holder', redis.call('HGETALL', KEY))
  end,
  holder_remove = function()
    local record = redis.call('HGETALL', KEY)
    redis.call('DEL', KEY)
    return reply('found', 'holder', record)
  end,
  holder_set = set_holder,
  holder_renew = function(fence, ttl)
    if redis.call('HGET', KEY, 'fence') ~= fence then
      return reply('gone')
    end
    redis.call('PEXPIRE', KEY, ttl)
    return reply('mine')
  end,
  holder_finish = function(fence, keep)
    if redis.call('HGET', KEY, 'fence') ~= fence then
      return reply('gone')
    end
    redis.call('HSET', KEY, 'finished_us', int(now_us()))
    redis.call('PEXPIRE', KEY, keep)
    return reply('kept')
  end,
  -- A release's hand-over: the record of the waiter the lease goes to.
  holder_pass = function(fence, ...)
    if redis.call('HGET', KEY, 'fence') ~= fence then
      return reply('gone')
    end
    return set_holder(...)
  end,
  holder_drop = function(fence)
    if redis.call('HGET', KEY, 'fence') ~= fence then
      return reply('gone')
    end
    redis.call('DEL', KEY)
    return reply('deleted')
  end,
}

-- The line (queue.lua's layout), read and kept one key at a time: a
-- waiter keeps its place, and a release finds whom to hand the lock to.
local function keep_at_least(ttl)
  local pttl = redis.call('PTTL', KEY)
  if pttl >= 0 and pttl < tonumber(ttl) then
    redis.call('PEXPIRE', KEY, ttl)
  end
end

local line_ops = {
  -- QUEUE: the first `count` ids in arrival order, and how many wait.
  line_front = function(count)
    return reply('front', 'ids', redis.call('ZRANGE', KEY, 0, tonumber(count) - 1),
      'waiting', redis.call('ZCARD', KEY))
  end,
  -- QUEUE or PLACES: `id` taken out.
  line_drop = function(id)
    redis.call('ZREM', KEY, id)
    return reply('dropped')
  end,
  -- Any key of the line: it stays at least `ttl` ms more, for a place
  -- refreshed meanwhile.
  line_keep = function(ttl)
    keep_at_least(ttl)
    return reply('kept')
  end,
  -- PLACES: when `id`'s place runs out (ms, server time), -1 for none.
  place_get = function(id)
    return reply('found', 'deadline', tonumber(redis.call('ZSCORE', KEY, id)) or -1)
  end,
  place_refresh = function(id, ttl)
    if not redis.call('ZSCORE', KEY, id) then
      return reply('gone')
    end
    redis.call('ZADD', KEY, int(math.floor(now_us() / 1000) + tonumber(ttl)), id)
    keep_at_least(ttl)
    return reply('refreshed')
  end,
  -- WAITERS: `id`'s record (JSON), '' for none.
  waiter_get = function(id)
    return reply('found', 'record', redis.call('HGET', KEY, id) or '')
  end,
  -- WAITERS: `id`'s record taken out, once its place and arrival are.
  waiter_drop = function(id)
    redis.call('HDEL', KEY, id)
    return reply('dropped')
  end,
}

local op = lease_ops[OP] or fence_ops[OP] or holder_ops[OP] or line_ops[OP]
if not op then
  return redis.error_reply('unknown operation ' .. OP)
end
return op(unpack(OPERANDS))
