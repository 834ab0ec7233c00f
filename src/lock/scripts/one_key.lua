-- One key of a lock whose cluster slot is being migrated (docs/design.md, "A
-- slot being migrated"). Its keys may then be split between the source and
-- the target node, and a script that names several of them is refused with
-- TRYAGAIN wherever they are not all present. Each call of this script names
-- one key and touches nothing else, so that it runs wherever that key is:
-- on the source while the key is still there, otherwise (ASK) on the
-- target, where a key created during the migration belongs anyway.
-- The arguments: `OneKeyArgs` in one_key.rs; the operations, each
-- with its OPERANDS:
--   lease_take token ttl   lease_renew token ttl   lease_release token keep_ms
--   lease_get              lease_remove            fence_next   fence_get
--   holder_get             holder_remove           holder_drop fence
--   holder_set host pid command fence ttl          holder_renew fence ttl
--   holder_finish fence keep_ms
--   holder_pass fence host pid command new_fence ttl
--   lease_pass token to ttl fence
--   line_front count       line_leave id          line_keep ttl
--   place_get id           place_refresh id ttl   waiter_get id
-- The fence, the holder record, leaving the line and the hand-over are
-- steps.lua's, as for the scripts that name every key.
-- Returns name-value pairs: kind (what was found or done), node (the id of
-- the node that ran it, or ''), replicas (connected and online, for WAIT),
-- now_us (server time), and pttl, fence, holder, ids, waiting, deadline or
-- record where the operation reads one; or guard.lua's wrongtype reply,
-- changing nothing, when the key holds another type.
local wrong = wrong_type({{KEY, HOLDS}})
if wrong then
  return wrong
end

-- Called after the writes, for online_replicas.
local function reply(kind, ...)
  local replicas = online_replicas()
  local node = ''
  if NAME_NODE == '1' then
    node = redis.call('CLUSTER', 'MYID')
  end
  return {'kind', kind, 'node', node, 'replicas', replicas, 'now_us', int(now_us), ...}
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
  -- token, with fencing token `fence`: the lease changes hands in one
  -- step, and the waiter is told with it.
  lease_pass = function(token, to, ttl, fence)
    if redis.call('GET', KEY) ~= token then
      return reply('gone')
    end
    redis.call('SET', KEY, to, 'PX', ttl)
    tell_granted(KEY, to, fence, nil)
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

local fence_ops = {
  fence_next = function()
    return reply('next', 'fence', next_fence(KEY))
  end,
  fence_get = function()
    return reply('found', 'fence', redis.call('GET', KEY) or '')
  end,
}

local function set_holder(host, pid, command, fence, ttl)
  write_holder(KEY, {host = host, pid = pid, command = command, ttl = ttl}, fence)
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
    redis.call('HSET', KEY, 'finished_us', int(now_us))
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
  -- Any key of the line: `id` taken out.
  line_leave = function(id)
    leave(KEY, HOLDS, id)
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
    redis.call('ZADD', KEY, int(now_ms + tonumber(ttl)), id)
    keep_at_least(ttl)
    return reply('refreshed')
  end,
  -- WAITERS: `id`'s record (JSON), '' for none.
  waiter_get = function(id)
    return reply('found', 'record', redis.call('HGET', KEY, id) or '')
  end,
}

local op = lease_ops[OP] or fence_ops[OP] or holder_ops[OP] or line_ops[OP]
if not op then
  return redis.error_reply('unknown operation ' .. OP)
end
return op(unpack(OPERANDS))
