-- Take the lock if it is free and nobody waits before us; otherwise, for a
-- run that WAITS, take its place in line (atomically with the failed try),
-- or refresh the place it has. The arguments: `AcquireArgs` in
-- acquire.rs.
-- Returns field names and values, in pairs, one of:
--      {kind='acquired', fence, replicas, slot (with N slots)}
--      {kind='busy', pttl, waiting, holder={holder fields...}, holding}  (once)
--      {kind='queued', pttl, waiting, holder={...}, holding, arrival, retry, node}
--      {kind='superseded', by='HOST pid N'}
--      {kind='done', done={the record's fields...}}                  (--once-per)
--      {kind='mismatch', slots}: the lock's holders and waiters agreed on
--         another number of slots; nothing was changed for this run
--      {kind='restarted', uptime=seconds}: a quorum member that does not
--         vote, having changed nothing
--      or wrong_type's reply (guard.lua), changing nothing, when a key is
--         not lockrun's
-- pttl: time_left() (queue.lua). holding: how many hold it together.
-- retry: ms until the caller should look again even without a message: the
-- pttl when it is first in line, otherwise until the first waiter's
-- place runs out (it may have died); -1 for no such moment.
-- replicas: how many replicas are connected and online, for lockrun to WAIT
-- for; 0 unless COUNT_REPLICAS. node: for a waiter that said which cluster
-- node it listens on (LISTENS_ON), the id of the node that ran this, so
-- that it follows the lock's slot when a resharding moved it.

-- A quorum member that restarted less than MIN_UPTIME_S seconds ago (one
-- ttl plus the drift allowance, rounded up) may have lost, with its keys, a
-- lease it granted to another run, which still counts it in its majority:
-- such a member does not vote until that lease must have run out
-- (Redlock's delayed restart). Redis 6.2 counts its uptime on the wall
-- clock: a clock set back since the start makes it negative, which counts
-- as a start just now, not as no uptime at all.
if MIN_UPTIME_S ~= '0' then
  local uptime = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%-?%d+)'))
  if uptime and uptime < tonumber(MIN_UPTIME_S) then
    return {'kind', 'restarted', 'uptime', math.max(uptime, 0)}
  end
end

-- The run's token is its id in line.
local me, ttl = TOKEN, TTL_MS
local waits = WAITS == '1'
local mine = {ttl = ttl, host = HOST, pid = PID, command = COMMAND,
  slots = tonumber(SLOTS) or 1, shared = SHARED == '1'}

local before

-- The success recorded for this period (release.lua), when this run asked
-- (--once-per) and one is there; nil otherwise. Checked in the same call
-- that would grant the lease, so that no run can slip in between.
local function recorded()
  if ONCE_PER ~= '1' then
    return nil
  end
  local done = redis.call('HGETALL', DONE)
  local until_ms = tonumber(redis.call('HGET', DONE, 'until'))
  if #done == 0 or not until_ms or until_ms <= now_ms then
    return nil
  end
  return done
end

-- A run that finds the job done this period gets the lock only to give it
-- back at once: it leaves the line and the lock goes to the next waiter,
-- who finds the same record.
local function skip(done)
  forget(me)
  admit(nil)
  announce(before, me)
  return {'kind', 'done', 'done', done}
end

-- A run that gives --supersede takes the place of every older waiting run
-- that gave it too: they are taken out of line and told by whom.
local function supersede(arrival)
  local by = HOST .. ' pid ' .. PID
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', SUPERSEDABLE, '-inf', '(' .. arrival)) do
    redis.call('ZREM', QUEUE, id)
    redis.call('ZREM', SUPERSEDABLE, id)
    -- Kept until its place runs out, for a run that misses the message.
    redis.call('HSET', WAITERS, id, cjson.encode({superseded_by = by}))
    redis.call('PUBLISH', channel(id), 'superseded ' .. by)
  end
end

-- Takes a place at the end of the line, or the place the caller had, and
-- refreshes it: a place lasts one ttl, like a lease, unless refreshed.
local function join()
  local arrival = redis.call('ZSCORE', QUEUE, me)
  if not arrival then
    arrival = ARRIVAL
    local new = arrival == ''
    if new then
      local last = redis.call('ZRANGE', QUEUE, -1, -1, 'WITHSCORES')[2]
      arrival = int(math.max((tonumber(last) or 0) + 1, now_us))
    end
    redis.call('ZADD', QUEUE, arrival, me)
    if SUPERSEDE == '1' then
      if new then
        supersede(arrival)
      end
      redis.call('ZADD', SUPERSEDABLE, arrival, me)
    end
  end
  redis.call('HSET', WAITERS, me, cjson.encode({host = HOST, pid = PID,
    command = COMMAND, ttl = ttl, refresh = REFRESH_MS, listening = LISTENING == '1',
    node = LISTENS_ON, supersede = SUPERSEDE == '1', slots = mine.slots, shared = mine.shared}))
  redis.call('ZADD', PLACES, int(now_ms + tonumber(ttl)), me)
  -- The queue's keys go when the last place runs out: runs that all died
  -- leave nothing behind.
  local latest = redis.call('ZRANGE', PLACES, -1, -1, 'WITHSCORES')[2]
  for _, key in ipairs({QUEUE, PLACES, WAITERS, SUPERSEDABLE}) do
    redis.call('PEXPIREAT', key, latest)
  end
  return arrival
end

-- The number of slots the lock's holders and waiters agreed on (1 for runs
-- that hold it alone or --shared), nil when nobody holds or waits. They
-- all agree, so any one of them tells. `lease`: the lease's value, read
-- already.
local function agreed_slots(lease)
  if lease then
    return 1
  end
  local id = redis.call('ZRANGE', LEASES, 0, 0)[1]
  local record = id and redis.call('HGET', HOLDERS, id)
  if not record then
    id = first_waiter()
    record = id and redis.call('HGET', WAITERS, id)
  end
  if record then
    return tonumber(cjson.decode(record).slots) or 1
  end
  return nil
end

local function acquired(fence, slot)
  local replicas = 0
  if COUNT_REPLICAS == '1' then
    -- No replica has acknowledged the lease yet: said in the holder record
    -- of a run alone now, so that lockrun notes the count in a call of its
    -- own (acked.lua) only when WAIT counted some. Before INFO: Redis < 7
    -- refuses writes after it.
    if redis.call('GET', LEASE) == me then
      redis.call('HSET', HOLDER, 'replicas_acked', 0)
    end
    replicas = online_replicas()
  end
  local reply = {'kind', 'acquired', 'fence', fence, 'replicas', replicas}
  if slot then
    reply[#reply + 1] = 'slot'
    reply[#reply + 1] = slot
  end
  return reply
end

-- The lease of a run holding the lock together that is this run's already
-- (handed over while it waited), renewed from this call; nil when none.
local function held_together()
  local record = redis.call('HGET', HOLDERS, me)
  if not (record and redis.call('ZSCORE', LEASES, me)) then
    return nil
  end
  redis.call('ZADD', LEASES, int(now_ms + tonumber(ttl)), me)
  expire_leases()
  forget(me)
  local held = cjson.decode(record)
  return acquired(held.fence, held.slot)
end

-- Nobody holds the lock, waits for it or holds it together (none of CROWD
-- exists): the run takes it at once, with nothing in line to keep in order.
if redis.call('EXISTS', LEASE, HOLDER, unpack(CROWD)) == 0 then
  -- Of ALONE, the lease and holder record are absent: EXISTS said so.
  local wrong = wrong_type({{FENCE, 'string'}, {DONE, 'hash'}})
  if wrong then
    return wrong
  end
  local done = recorded()
  if done then
    return {'kind', 'done', 'done', done}
  end
  return acquired(hold(me, mine))
end
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
before = front()
drop_expired()
if drop_expired_leases() then
  -- Places of holders that died: to those first in line.
  admit(me)
end
if together(mine) then
  local reply = held_together()
  if reply then
    return reply
  end
end
local lease = redis.call('GET', LEASE)
if lease == me then
  -- This run's already: a release handed it over (while the run was not
  -- listening, or to be confirmed and acknowledged by replicas), or an
  -- earlier attempt took it and its reply was lost (a timeout, a failover).
  -- From now on the lease counts from this call, whose send the caller knows.
  -- A lease handed over to a --once-per run is confirmed by this call
  -- (handed_over), so that the record its holder just wrote is seen.
  local done = recorded()
  if done then
    redis.call('DEL', LEASE, HOLDER)
    return skip(done)
  end
  local fence = redis.call('HGET', HOLDER, 'fence')
  if fence then
    redis.call('PEXPIRE', LEASE, ttl)
    redis.call('PEXPIRE', HOLDER, ttl)
    forget(me)
  else
    -- Its holder record is gone, and with it the fencing token: a new one.
    fence = grant(me, mine)
  end
  return acquired(fence, nil)
end
local record = redis.call('HGET', WAITERS, me)
if record then
  local by = cjson.decode(record).superseded_by
  if by then
    forget(me)
    return {'kind', 'superseded', 'by', by}
  end
end
local theirs = agreed_slots(lease)
if theirs and theirs ~= mine.slots then
  announce(before, me)
  return {'kind', 'mismatch', 'slots', theirs}
end
local arrival
local first, first_deadline = first_waiter()
local free = admissible(mine)
if waits and (not free or (first and first ~= me)) then
  arrival = join()
  -- Back at an earlier place, it may be first now; a newer --supersede run
  -- may have taken the first one's place.
  first, first_deadline = first_waiter()
end
if free and (not first or first == me) then
  local done = recorded()
  if done then
    return skip(done)
  end
  local fence, slot = grant(me, mine)
  if together(mine) then
    -- Runs behind this one may hold it beside it.
    admit(nil)
  end
  announce(before, me)
  return acquired(fence, slot)
end
announce(before, me)
local pttl = time_left()
local waiting = redis.call('ZCARD', QUEUE)
local holder = redis.call('HGETALL', HOLDER)
local holding = redis.call('ZCARD', LEASES)
if #holder == 0 and holding > 0 then
  -- The one whose lease runs out first.
  local id = redis.call('ZRANGE', LEASES, 0, 0)[1]
  local record = redis.call('HGET', HOLDERS, id)
  if record then
    holder = holder_fields(id, record)
  end
end
if not waits then
  return {'kind', 'busy', 'pttl', pttl, 'waiting', waiting, 'holder', holder,
    'holding', holding}
end
local retry = -1
if first == me then
  if pttl >= 0 then
    retry = pttl
  end
elseif first_deadline then
  retry = first_deadline - now_ms
end
local node = ''
if LISTENS_ON ~= '' then
  node = here() or ''
end
return {'kind', 'queued', 'pttl', pttl, 'waiting', waiting, 'holder', holder,
  'holding', holding, 'arrival', arrival, 'retry', retry, 'node', node}
