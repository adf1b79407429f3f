-- common.lua: helpers shared by the algorithm families. The scripts are
-- concatenated in the order clock, common, meter, window, log, lease, decide and
-- loaded as one script, so that a decision's rules of any families are
-- evaluated in one atomic call. Every function mirrors the Go function of
-- package limit named in its comment, operation for operation: Lua numbers
-- are IEEE doubles, as Go's float64, and every value stays below 2^53.

local SLACK = tonumber(ARGV[2])

-- limit.micros: a non-negative count of microseconds, rounded up.
local function micros(us)
  if us <= 0 then return 0 end
  local t = math.floor(us)
  if t < us then t = t + 1 end
  return t
end

-- limit.floorNonNeg
local function floor_nonneg(x)
  if x <= 0 then return 0 end
  return math.floor(x)
end

-- limit.effectiveNow
local function effective_now(last, now)
  if now < last then return last end
  if now < 0 then return 0 end
  return now
end

-- A result: allowed (boolean), limit, remaining, reset, retry (-1 = never),
-- delay; times in microseconds.
local function result(limit)
  return {allowed = false, limit = limit, remaining = 0, reset = 0, retry = 0, delay = 0}
end
