-- Notes in the holder record how many replicas acknowledged the lease, for
-- `lockrun status`, but only while the lease still holds the caller's token:
-- the record may be another run's by now.
-- Returns 1 when noted, 0 when the lease is no longer the caller's.
local ours = redis.call('TYPE', LEASE).ok == 'string'
ours = ours and redis.call('GET', LEASE) == TOKEN
ours = ours and redis.call('TYPE', HOLDER).ok == 'hash'
if not ours then
  return 0
end
redis.call('HSET', HOLDER, 'replicas_acked', REPLICAS_ACKED)
return 1
