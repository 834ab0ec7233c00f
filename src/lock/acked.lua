-- Notes in the holder record how many replicas acknowledged the lease, for
-- `lockrun status`, but only while the lease still holds the caller's token:
-- the record may be another run's by now.
-- KEYS[1] lease  KEYS[2] holder record  ARGV[1] token  ARGV[2] the count
-- Returns 1 when noted, 0 when the lease is no longer the caller's.
local ours = redis.call('TYPE', KEYS[1]).ok == 'string'
ours = ours and redis.call('GET', KEYS[1]) == ARGV[1]
ours = ours and redis.call('TYPE', KEYS[2]).ok == 'hash'
if not ours then
  return 0
end
redis.call('HSET', KEYS[2], 'replicas_acked', ARGV[2])
return 1
