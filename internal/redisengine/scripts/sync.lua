-- sync.lua: reconciles what deciders counted locally (rules with a Sync
-- interval) with the shared state, and answers that state. It adds each
-- key's cost without a bound check: the decider already admitted it, so the
-- shared state must record it, even beyond the limit (the overshoot local
-- counting allows, which the meters then pay back: their debt drains at
-- the rule's rate before anything more is admitted). A negative cost gives
-- back what a decider refunded after the cost went out. The state encoding
-- is single.lua's and window1.lua's, so strict and local decisions of one
-- rule count together.
--
-- KEYS: counter keys.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, then per key:
--   family (0: meter, token bucket or GCRA without warm-up; 1: fixed window),
--   cost, interval µs per unit (meter) or window µs (fixed window), and the
--   start of the window the cost was counted in (fixed window).
-- Reply: per key, the state's time (µs) and its value: the debt in µs,
--   rounded up (meter), or the count of the window holding that time.

local min_ttl = tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local o = 2 + (i - 1) * 4
  local family, cost, p, since = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
  local last, x = 0, 0
  local raw = redis.call('GET', key)
  if raw and string.byte(raw) == 193 then -- the flat scripts' encoding (flat.lua)
    local _
    _, last, x = struct.unpack('<Bdddd', raw)
  elseif raw then
    local s = cmsgpack.unpack(raw)
    last, x = s[1], s[2]
  end
  local t = now
  if t < last then t = last elseif t < 0 then t = 0 end -- effective_now
  local value
  if family == 0 then
    local debt = x - (t - last)
    if debt < 0 then debt = 0 end
    if cost ~= 0 then
      debt = debt + cost * p
      if debt < 0 then debt = 0 end
      redis.call('SET', key, cmsgpack.pack({t, debt, 0}), 'PX', math.max(math.ceil(debt / 1000), min_ttl))
    end
    value = math.ceil(debt)
  else
    local ws = t - t % p
    local count = 0
    if last >= ws then count = x end
    -- A cost of a window that has ended no longer limits anything; one of
    -- a window Redis has not reached (the decider's clock is ahead) counts
    -- in the current one.
    if cost ~= 0 and since >= ws then
      count = count + cost
      if count < 0 then count = 0 end
      redis.call('SET', key, cmsgpack.pack({t, count, 0}), 'PX', math.max(math.ceil((ws + p - t) / 1000), min_ttl))
    end
    value = count
  end
  out[2 * i - 1] = t
  out[2 * i] = value
end
return out
