-- Extend the lease, but only while the lock still holds our token.
-- KEYS[1] lock  KEYS[2] holder record   ARGV[1] token  ARGV[2] ttl in ms
-- Returns 1 when renewed, 0 when the token is gone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
