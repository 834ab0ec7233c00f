-- Give the lock up, but only while it still holds our token.
-- KEYS[1] lock  KEYS[2] holder record
-- ARGV[1] token  ARGV[2] ms to keep it (0: delete now)  ARGV[3] release channel
-- Returns 1 when deleted, 2 when kept for ARGV[2] ms, 0 when not ours.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
-- A key of another type in its place (GET would fail on it) is not our token.
if redis.call('TYPE', KEYS[1]).ok ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- Only a hash is our holder record; anything else there is not ours to touch.
local holder = redis.call('TYPE', KEYS[2]).ok == 'hash'
local keep = tonumber(ARGV[2])
if keep > 0 then
  if holder then
    -- The command is done: status and busy runs say so instead of pointing
    -- at a process that no longer exists.
    local now = redis.call('TIME')
    redis.call('HSET', KEYS[2], 'finished_us',
      string.format('%d', tonumber(now[1]) * 1000000 + tonumber(now[2])))
    redis.call('PEXPIRE', KEYS[2], keep)
  end
  redis.call('PEXPIRE', KEYS[1], keep)
  return 2
end
redis.call('DEL', KEYS[1])
if holder then
  redis.call('DEL', KEYS[2])
end
-- Waiters subscribe to this channel so they retry at once instead of polling.
redis.call('PUBLISH', ARGV[3], 'released')
return 1
