-- Extend the lease, but only while the lock still holds our token.
-- KEYS[1] lock  KEYS[2] holder record   ARGV[1] token  ARGV[2] ttl in ms
-- Returns {renewed=1, replicas} as name-value pairs when renewed, {renewed=0,
-- replicas=0} when the token is gone; replicas
-- is how many replicas are connected and online, for lockrun to WAIT for.
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
-- Read after the writes: Redis < 7 refuses writes after INFO in a script.
local replicas = 0
for _ in string.gmatch(redis.call('INFO', 'replication'), 'slave%d+:[^\r\n]*state=online') do
  replicas = replicas + 1
end
return {'renewed', 1, 'replicas', replicas}
