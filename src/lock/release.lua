-- Give the lock up, but only while it still holds our token.
-- KEYS[1] lock  KEYS[2] holder record
-- ARGV[1] token  ARGV[2] ms to keep it (0: delete now)  ARGV[3] release channel
-- Returns 1 when deleted, 2 when kept for ARGV[2] ms, 0 when not ours.
if redis.replicate_commands then
  -- Redis < 7 must be told before TIME is followed by writes; 7+ ignores it.
  redis.replicate_commands()
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  -- The command is done: status and busy runs say so instead of pointing
  -- at a process that no longer exists.
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[2], 'finished_us',
    string.format('%d', tonumber(now[1]) * 1000000 + tonumber(now[2])))
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('PEXPIRE', KEYS[2], keep)
  return 2
end
redis.call('DEL', KEYS[1], KEYS[2])
-- Waiters subscribe to this channel so they retry at once instead of polling.
redis.call('PUBLISH', ARGV[3], 'released')
return 1
