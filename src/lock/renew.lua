-- Extend the lease, but only while the lock still holds our token.
-- KEYS[1] lock  KEYS[2] holder record  KEYS[3] leases held together
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] '1' when the lease is one held
-- together (--slots above 1, --shared): its expiry is its score in KEYS[3],
-- on this server's clock, and KEYS[3] and the records' hash KEYS[4] expire
-- with the latest lease
-- Returns {renewed=1, replicas} as name-value pairs when renewed, {renewed=0,
-- replicas=0} when the token is gone; replicas
-- is how many replicas are connected and online, for lockrun to WAIT for.
local function renewed()
  -- Read after the writes: Redis < 7 refuses writes after INFO in a script.
  local replicas = 0
  for _ in string.gmatch(redis.call('INFO', 'replication'), 'slave%d+:[^\r\n]*state=online') do
    replicas = replicas + 1
  end
  return {'renewed', 1, 'replicas', replicas}
end
if ARGV[3] == '1' then
  if redis.call('TYPE', KEYS[3]).ok ~= 'zset' then
    return {'renewed', 0, 'replicas', 0}
  end
  if redis.replicate_commands then
    -- Redis < 7 must be told before TIME is followed by writes.
    redis.replicate_commands()
  end
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
  if not deadline or deadline < now_ms then
    return {'renewed', 0, 'replicas', 0}
  end
  redis.call('ZADD', KEYS[3], string.format('%d', now_ms + tonumber(ARGV[2])), ARGV[1])
  local latest = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[3], latest)
  if redis.call('TYPE', KEYS[4]).ok == 'hash' then
    redis.call('PEXPIREAT', KEYS[4], latest)
  end
  return renewed()
end
-- A key of another type in its place (GET would fail on it) is not our token.
local ours = redis.call('TYPE', KEYS[1]).ok == 'string'
ours = ours and redis.call('GET', KEYS[1]) == ARGV[1]
if not ours then
  return {'renewed', 0, 'replicas', 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return renewed()
