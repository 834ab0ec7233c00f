-- Take the lock if it is free, and hand out the next fencing token.
-- KEYS[1] lock  KEYS[2] fence counter  KEYS[3] holder record
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] host  ARGV[4] pid  ARGV[5] command
-- Returns {1, fence, {}, replicas} when acquired, {0, pttl, {holder fields...},
-- replicas} when busy; replicas is how many replicas are connected and online,
-- for lockrun to WAIT for. When a key is not lockrun's, returns wrong_type's
-- reply (guard.lua) and changes nothing.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
local wrong = wrong_type({{KEYS[1], 'string'}, {KEYS[2], 'string'}, {KEYS[3], 'hash'}})
if wrong then
  return wrong
end
local function online_replicas()
  local n = 0
  for _ in string.gmatch(redis.call('INFO', 'replication'), 'slave%d+:[^\r\n]*state=online') do
    n = n + 1
  end
  return n
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  -- An earlier attempt of this run took it and its reply was lost (a timeout,
  -- a failover): it is ours. The lease counts from this request, so restart it.
  local fence = redis.call('HGET', KEYS[3], 'fence')
  if fence then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
    return {1, fence, {}, online_replicas()}
  end
end
if held or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[3]), online_replicas()}
end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
-- A token is at least the server clock in microseconds and always above the
-- last one stored, so it keeps growing even after Redis lost every key.
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now_us)
local fence_text = string.format('%d', fence)
redis.call('SET', KEYS[2], fence_text)
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'host', ARGV[3], 'pid', ARGV[4], 'command', ARGV[5],
  'acquired_us', string.format('%d', now_us), 'fence', fence_text)
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, fence_text, {}, online_replicas()}
