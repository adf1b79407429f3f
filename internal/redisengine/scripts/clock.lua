-- clock.lua: the decision's time, now in µs, for the script it opens:
-- ARGV[1], or Redis TIME when ARGV[1] is empty. Tests pass time; deciders
-- let Redis keep one clock per key, whatever their own clocks say.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
