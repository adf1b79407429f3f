-- single.lua: the most common decision, one rule of the meter family (token
-- bucket, GCRA, leaky bucket as a queue; no warm-up). It answers exactly as
-- decide.lua would, with the same state encoding, so a key may be reached
-- by either script; it is written out flat, without decide.lua's rule
-- tables and function definitions, because Redis runs a script's whole
-- body on every call: this costs Redis about 8 µs of CPU where decide.lua
-- costs 20 (BenchmarkScriptCPU), and Redis's CPU is a deployment's ceiling.
-- Every step mirrors limit.meter (and meter.lua), operation for operation.
--
-- KEYS[1]: the counter key.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, cost, shadow (0/1),
--   capacity, shown, interval, per_us, bound, queue (0/1).
-- Reply: as decide.lua's for one rule.

local key = KEYS[1]
local cost, shadow, capacity = tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local shown, interval, per_us, bound = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local function micros(us)
  if us <= 0 then return 0 end
  return math.ceil(us)
end
local function floor_nonneg(x)
  if x <= 0 then return 0 end
  return math.floor(x)
end

local last, debt = 0, 0
local raw = redis.call('GET', key)
if raw then
  local s = cmsgpack.unpack(raw)
  last, debt = s[1], s[2]
end
if now < last then now = last elseif now < 0 then now = 0 end -- effective_now
debt = debt - (now - last)
if debt < 0 then debt = 0 end

-- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
-- non-zero one is refused for good, a zero one answers from the state.
if cost ~= 0 and (cost < 0 or cost > capacity) then
  return {shadow and 1 or 0, 0, shown, floor_nonneg((bound - debt) * per_us), micros(debt), -1, 0}
end
local new_debt = debt + cost * interval
if new_debt > bound then
  return {shadow and 1 or 0, 0, shown, floor_nonneg((bound - debt) * per_us), micros(debt), micros(new_debt - bound), 0}
end
local reset = micros(new_debt)
if cost > 0 then
  redis.call('SET', key, cmsgpack.pack({now, new_debt, 0}), 'PX', math.max(math.ceil(reset / 1000), tonumber(ARGV[2])))
end
local delay = 0
if ARGV[10] == '1' then delay = micros(debt) end
return {1, 1, shown, floor_nonneg((bound - new_debt) * per_us), reset, 0, delay}
