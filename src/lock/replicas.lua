-- How many replicas are connected and online, for lockrun to WAIT for. Call
-- it after the writes: Redis < 7 refuses writes after INFO in a script.
local function online_replicas()
  local n = 0
  for _ in string.gmatch(redis.call('INFO', 'replication'), 'slave%d+:[^\r\n]*state=online') do
    n = n + 1
  end
  return n
end

