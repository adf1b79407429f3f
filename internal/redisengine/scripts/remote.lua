-- remote.lua: charges a region's meters (token buckets and GCRA without
-- warm-up, rules of scope global) with what another region's decider
-- runs admitted, once per region whichever of its deciders sends it. A
-- run's admissions on a counter only grow; a hash beside the counter
-- keeps, per run, the count already charged, so that only the rise is
-- added: as debt, without a bound check, as sync.lua's meters.
--
-- KEYS: counter keys.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, then per key: the
--   run (field of the hash), its count, and the meter's µs per unit.
-- Reply: per key, the units charged now.

local min_ttl = tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local o = 2 + (i - 1) * 3
  local run, n, per = ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local marks = key .. ':remote'
  local charged = tonumber(redis.call('HGET', marks, run) or '0')
  local rise = n - charged
  if rise > 0 then
    local last, x, y, expires = 0, 0, 0, nil
    local raw = redis.call('GET', key)
    if raw then
      -- load
    end
    local t = now
    if t < last then t = last elseif t < 0 then t = 0 end -- effective_now
    local debt = x - (t - last)
    if debt < 0 then debt = 0 end
    debt = debt + rise * per
    local ttl = math.max(math.ceil(debt / 1000), min_ttl)
    redis.call('SET', key, cmsgpack.pack({t, debt, 0}), 'PX', ttl)
    redis.call('HSET', marks, run, n)
    redis.call('PEXPIRE', marks, math.max(ttl, 3600000))
    out[i] = rise
  else
    out[i] = 0
  end
end
return out
