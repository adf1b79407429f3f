-- window1.lua: single.lua's counterpart for one rule of the window-counter
-- family: the fixed window (the algorithm of envoyproxy/ratelimit, and of
-- every rule `sluice import` brings over) and the weighted sliding window.
-- It answers exactly as decide.lua would, with the same state encoding, so
-- a key may be reached by either script, for under half decide.lua's Redis
-- CPU (BenchmarkScriptCPU). Every step mirrors limit.fixedWindow and
-- limit.slidingWindow (and window.lua), operation for operation.
--
-- KEYS[1]: the counter key.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, cost, shadow (0/1),
--   capacity, shown, limit, window µs, sliding (0/1), SLACK.
-- Reply: as decide.lua's for one rule.

local key = KEYS[1]
local cost, shadow, capacity = tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local shown, limit, w = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local last, x, y = 0, 0, 0
local raw = redis.call('GET', key)
if raw then
  local s = cmsgpack.unpack(raw)
  last, x, y = s[1], s[2], s[3]
end
if now < last then now = last elseif now < 0 then now = 0 end -- effective_now

-- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
-- non-zero one is refused for good, a zero one answers from the state.
local c = cost
if c <= 0 or c > capacity then c = 0 end

local ws = now - now % w
local allowed, remaining, reset, retry = false, 0, 0, 0
local cur, prev = 0, 0
if ARGV[9] == '1' then -- limit.slidingWindow
  local lw = last - last % w
  if lw == ws then cur, prev = x, y elseif lw == ws - w then prev = x end
  local weight = (w - (now - ws)) / w
  local est = prev * weight + cur
  local ceiling = limit * tonumber(ARGV[10])
  if est + c <= ceiling then
    allowed = true
    cur = cur + c
    est = est + c
  else
    local need = limit - c
    local at
    if cur <= need then
      at = w - (need - cur) * w / prev
    else
      at = w + math.max(w - need * w / cur, 0)
    end
    retry = math.ceil((ws - now) + at)
    if retry < 0 then retry = 0 end
  end
  remaining = ceiling - est
  if remaining <= 0 then remaining = 0 else remaining = math.floor(remaining) end
  if cur > 0 then reset = ws + 2 * w - now elseif prev > 0 then reset = ws + w - now end
else -- limit.fixedWindow
  if last >= ws then cur = x end
  local finish = ws + w - now
  if cur + c <= limit then
    allowed = true
    cur = cur + c
  else
    retry = finish
  end
  remaining = limit - cur
  if cur > 0 then reset = finish end
end

if c ~= cost then allowed = false; retry = -1 end
if not allowed then
  return {shadow and 1 or 0, 0, shown, remaining, reset, retry, 0}
end
if c > 0 then
  redis.call('SET', key, cmsgpack.pack({now, cur, prev}), 'PX', math.max(math.ceil(reset / 1000), tonumber(ARGV[2])))
end
return {1, 1, shown, remaining, reset, 0, 0}
