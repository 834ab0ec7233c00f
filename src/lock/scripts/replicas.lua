-- How many replicas lockrun WAITs for under --replica-acks all: those the
-- primary counts as online whose last acknowledgement of the replication
-- stream is at most 2 s old (`lag`, whole seconds). A replica acknowledges
-- every second, so a healthy one reads 0 or 1, and 2 when an acknowledgement
-- comes a moment late across a second's boundary; a replica that stalled
-- (its link open, nothing answering) would otherwise be waited for, and
-- every run refused, until the primary drops it after repl-timeout (60 s).
-- Call it after the writes: Redis < 7 refuses writes after INFO in a script.
local function online_replicas()
  local n = 0
  local info = redis.call('INFO', 'replication')
  for lag in string.gmatch(info, 'slave%d+:[^\r\n]*state=online[^\r\n]*lag=(%d+)') do
    if tonumber(lag) <= 2 then
      n = n + 1
    end
  end
  return n
end
