-- window1.lua: single.lua's counterpart for one rule of the window-counter
-- family: the fixed window (the algorithm of envoyproxy/ratelimit, and of
-- every rule `sluice import` brings over) and the weighted sliding window.
-- It answers exactly as decide.lua would, with the same state encoding, so
-- a key may be reached by either script, for under half decide.lua's Redis
-- CPU (BenchmarkScriptCPU). Every step mirrors limit.fixedWindow and
-- limit.slidingWindow (and window.lua), operation for operation.
--
-- Like single.lua, it decides every key it is given, each independently
-- (the flusher merges a pipeline's calls of it).
--
-- KEYS: the counter keys, one per decision.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, then for each key:
--   cost, shadow (0/1), capacity, shown, limit, window µs, sliding (0/1),
--   SLACK.
-- Reply: for each key in turn, the 7 values of decide.lua's reply for one
-- rule.

local min_ttl = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local key, a = KEYS[i], 2 + (i - 1) * 8
  local cost, shadow, capacity = tonumber(ARGV[a + 1]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3])
  local shown, limit, w = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local o = #out

  local t, last, x, y = now, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    local s = cmsgpack.unpack(raw)
    last, x, y = s[1], s[2], s[3]
  end
  if t < last then t = last elseif t < 0 then t = 0 end -- effective_now

  -- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
  -- non-zero one is refused for good, a zero one answers from the state.
  local c = cost
  if c <= 0 or c > capacity then c = 0 end

  local ws = t - t % w
  local allowed, remaining, reset, retry = false, 0, 0, 0
  local cur, prev = 0, 0
  if ARGV[a + 7] == '1' then -- limit.slidingWindow
    local lw = last - last % w
    if lw == ws then cur, prev = x, y elseif lw == ws - w then prev = x end
    local weight = (w - (t - ws)) / w
    local est = prev * weight + cur
    local ceiling = limit * tonumber(ARGV[a + 8])
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
      retry = math.ceil((ws - t) + at)
      if retry < 0 then retry = 0 end
    end
    remaining = ceiling - est
    if remaining <= 0 then remaining = 0 else remaining = math.floor(remaining) end
    if cur > 0 then reset = ws + 2 * w - t elseif prev > 0 then reset = ws + w - t end
  else -- limit.fixedWindow
    if last >= ws then cur = x end
    local finish = ws + w - t
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
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
      shadow and 1 or 0, 0, shown, remaining, reset, retry, 0
  else
    if c > 0 then
      redis.call('SET', key, cmsgpack.pack({t, cur, prev}), 'PX', math.max(math.ceil(reset / 1000), min_ttl))
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
      1, 1, shown, remaining, reset, 0, 0
  end
end
return out
