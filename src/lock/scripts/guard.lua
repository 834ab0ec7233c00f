-- Put in front of the scripts that work on a lock and its line, and in
-- front of one_key.lua (each script's `Lua::new` in its .rs file). Each of a
-- lock's keys holds one type (`Key::holds`, src/lock/keys.rs). A key of
-- another type is someone else's data under lockrun's name: a list at the
-- lease's name is not a busy lock, and must be neither read as one nor
-- removed. `checks` is a list of {key, type}, such as OURS; the first key
-- that exists with another type is returned as
-- {'kind', 'wrongtype', 'key', key, 'holds', its type}, for the script to
-- return before touching anything; nil when every key is as lockrun keeps
-- it or absent.
local function wrong_type(checks)
  for _, check in ipairs(checks) do
    local holds = redis.call('TYPE', check[1]).ok
    if holds ~= 'none' and holds ~= check[2] then
      return {'kind', 'wrongtype', 'key', check[1], 'holds', holds}
    end
  end
  return nil
end

