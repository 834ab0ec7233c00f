-- Quorum mode only, put between queue.lua and acquire.lua: a member that
-- restarted less than ARGV[15] seconds ago (one ttl plus the drift
-- allowance, rounded up) may have lost, with its keys, a lease it granted
-- to another run, which still counts it in its majority: such a member does
-- not vote until that lease must have run out (Redlock's delayed restart).
-- Returns {kind='restarted', uptime=seconds} as name-value pairs, having
-- changed nothing.
local uptime = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
if uptime and uptime < tonumber(ARGV[15]) then
  return {'kind', 'restarted', 'uptime', uptime}
end
