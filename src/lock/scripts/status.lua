-- Read the lock's state and its queue in one consistent view, changing
-- nothing. Unlike the other scripts it lists the whole queue, O(N): an
-- operator asked for all of it.
-- Returns name-value pairs: {pttl, holder={fields...}, lease=its token or '', now_us=server time,
--          fence=last fence or '', waiters={arrival, record, ...} of live
--          waiters in order, done={fields...} of the recorded success,
--          together={{fields...}, ...} of the live runs holding it together,
--          each with its token and 'left' (ms of its lease),
--          history={record, ...} of the runs recorded, newest first},
-- or wrong_type's reply (guard.lua) when a key is not lockrun's.
local wrong = wrong_type(OURS)
if wrong then
  return wrong
end
local waiters = {}
local line = redis.call('ZRANGE', QUEUE, 0, -1, 'WITHSCORES')
for i = 1, #line, 2 do
  local deadline = tonumber(redis.call('ZSCORE', PLACES, line[i]))
  local record = redis.call('HGET', WAITERS, line[i])
  if deadline and deadline >= now_ms and record then
    waiters[#waiters + 1] = line[i + 1]
    waiters[#waiters + 1] = record
  end
end
local pttl = redis.call('PTTL', LEASE)
local holder = redis.call('HGETALL', HOLDER)
local fence = redis.call('GET', FENCE) or ''
local done = redis.call('HGETALL', DONE)
local together = {}
local leases = redis.call('ZRANGE', LEASES, 0, -1, 'WITHSCORES')
for i = 1, #leases, 2 do
  local left = tonumber(leases[i + 1]) - now_ms
  local record = redis.call('HGET', HOLDERS, leases[i])
  if left >= 0 and record then
    local fields = holder_fields(leases[i], record)
    fields[#fields + 1] = 'left'
    fields[#fields + 1] = int(left)
    together[#together + 1] = fields
  end
end
-- At most --history entries (release.lua trims it), so all of it.
local history = redis.call('LRANGE', HISTORY, 0, -1)
return {'pttl', pttl, 'holder', holder, 'lease', redis.call('GET', LEASE) or '', 'now_us', int(now_us), 'fence', fence, 'waiters', waiters,
  'done', done, 'together', together, 'history', history}
