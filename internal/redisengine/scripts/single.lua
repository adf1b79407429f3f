-- single.lua: the most common decision, one rule of the meter family (token
-- bucket, GCRA, leaky bucket as a queue; no warm-up). It answers exactly as
-- decide.lua would, with the same state encoding, so a key may be reached
-- by either script; it is written out flat, without decide.lua's rule
-- tables and function definitions, because Redis runs a script's whole
-- body on every call: this costs Redis about 8 µs of CPU where decide.lua
-- costs 20 (BenchmarkScriptCPU), and Redis's CPU is a deployment's ceiling.
-- Every step mirrors limit.meter (and meter.lua), operation for operation.
--
-- It decides every key it is given, each independently with its own
-- arguments (the batching flusher merges the single-rule decisions of a
-- pipeline into one call: Redis's cost of a call, about a third of this
-- script's, is paid once per pipeline instead of once per decision).
--
-- KEYS: the counter keys, one per decision.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, then for each key:
--   cost, shadow (0/1), capacity, shown, interval, per_us, bound, queue (0/1).
-- Reply: for each key in turn, the 7 values of decide.lua's reply for one
-- rule.

local min_ttl = tonumber(ARGV[2])

local function micros(us)
  if us <= 0 then return 0 end
  return math.ceil(us)
end
local function floor_nonneg(x)
  if x <= 0 then return 0 end
  return math.floor(x)
end

local out = {}
for i = 1, #KEYS do
  local key, a = KEYS[i], 2 + (i - 1) * 8
  local cost, shadow, capacity = tonumber(ARGV[a + 1]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3])
  local shown, interval, per_us, bound = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local o = #out

  local t, last, debt = now, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    local s = cmsgpack.unpack(raw)
    last, debt = s[1], s[2]
  end
  if t < last then t = last elseif t < 0 then t = 0 end -- effective_now
  debt = debt - (t - last)
  if debt < 0 then debt = 0 end

  -- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
  -- non-zero one is refused for good, a zero one answers from the state.
  local new_debt = debt + cost * interval
  if cost ~= 0 and (cost < 0 or cost > capacity) then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
      shadow and 1 or 0, 0, shown, floor_nonneg((bound - debt) * per_us), micros(debt), -1, 0
  elseif new_debt > bound then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
      shadow and 1 or 0, 0, shown, floor_nonneg((bound - debt) * per_us), micros(debt), micros(new_debt - bound), 0
  else
    local reset = micros(new_debt)
    if cost > 0 then
      redis.call('SET', key, cmsgpack.pack({t, new_debt, 0}), 'PX', math.max(math.ceil(reset / 1000), min_ttl))
    end
    local delay = 0
    if ARGV[a + 8] == '1' then delay = micros(debt) end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
      1, 1, shown, floor_nonneg((bound - new_debt) * per_us), reset, 0, delay
  end
end
return out
