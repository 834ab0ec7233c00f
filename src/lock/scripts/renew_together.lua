-- Extend the lease of a run holding the lock together (--slots above 1,
-- --shared), but only while it is still the run's: its expiry is TOKEN's
-- score in LEASES, on this server's clock, and LEASES and HOLDERS expire
-- with the latest lease.
-- Returns what renew.lua does.
if redis.call('TYPE', LEASES).ok ~= 'zset' then
  return {'renewed', 0, 'replicas', 0}
end
local deadline = tonumber(redis.call('ZSCORE', LEASES, TOKEN))
if not deadline or deadline < now_ms then
  return {'renewed', 0, 'replicas', 0}
end
redis.call('ZADD', LEASES, int(now_ms + tonumber(TTL_MS)), TOKEN)
local latest = redis.call('ZRANGE', LEASES, -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', LEASES, latest)
if redis.call('TYPE', HOLDERS).ok == 'hash' then
  redis.call('PEXPIREAT', HOLDERS, latest)
end
return {'renewed', 1, 'replicas', online_replicas()}
