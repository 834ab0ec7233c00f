-- Extend the lease of a run holding the lock alone, but only while LEASE
-- still holds its TOKEN.
-- Returns {renewed=1, replicas} as name-value pairs when renewed, {renewed=0,
-- replicas=0} when the token is gone; replicas is how many replicas are
-- connected and online, for lockrun to WAIT for.
-- A key of another type in its place (GET would fail on it) is not our token.
local ours = redis.call('TYPE', LEASE).ok == 'string'
ours = ours and redis.call('GET', LEASE) == TOKEN
if not ours then
  return {'renewed', 0, 'replicas', 0}
end
redis.call('PEXPIRE', LEASE, TTL_MS)
if redis.call('TYPE', HOLDER).ok == 'hash' then
  redis.call('PEXPIRE', HOLDER, TTL_MS)
end
return {'renewed', 1, 'replicas', online_replicas()}
