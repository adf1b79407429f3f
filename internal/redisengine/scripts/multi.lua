-- multi.lua: decisions of several rules, all of the meter family (token
-- bucket, GCRA, leaky bucket as a queue; no warm-up) or the window-counter
-- family (fixed and weighted sliding window), each decision all or
-- nothing, for about half decide.lua's Redis CPU: this loop with the steps
-- of the two families (single.lua, window1.lua) put in place of the lines
-- "-- meter step" and "-- window step", and load.lua and store.lua of
-- "-- load" and "-- store" (see multiScript); states as flat.lua's. It decides every
-- decision it is given, independently (the batching flusher merges a
-- pipeline's calls of it into one call). Decisions of one rule go to the
-- flat scripts (flat.lua), which need neither the decision's bounds nor a
-- second pass. Like them, this is written out without functions, and with
-- two tables a call.
--
-- KEYS: the counter keys of the decisions' rules, in order, a decision's
--   keys distinct.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms, the number of
--   parameter groups, the groups (7 fields each: the family, 0 meter or 1
--   window, then the family's six, as in flat.lua); then for each decision
--   its number of rules, then for each rule its cost and its group
--   (1-based; negative for a shadow rule, whose rejection rejects
--   nothing). A merged call carries each limiter's group once.
-- Reply: for each decision, admitted (0/1), then for each rule flat.lua's
--   5 values.
--
-- State and expiries: flat.lua's.

local min_ttl = tonumber(ARGV[2])
local redis_clock = ARGV[1] == ''
local now_ms = math.floor(now / 1000) -- at most Redis's time now
local group, fam, p1, p2, p3, p4, p5, p6 = 0, 0
local out = {}
-- S holds a decision's rules' states (4 values each: last, x, y, expires)
-- and W its writes (6 values each: key, t, x, y, expires, reset), kept
-- until the decision is known.
local S, W = {}, {}
local k, a = 0, 3 + 7 * tonumber(ARGV[3]) -- the keys and arguments read
while k < #KEYS do
  local n = tonumber(ARGV[a + 1])
  local o0, admitted, writes = #out, true, 0
  out[o0 + 1] = 1
  -- The first pass decides each rule with its cost; when a rule rejects,
  -- a second gives the rules that would have admitted their answers from
  -- their untouched state, as with a cost of 0.
  local pass, j = 1, 1
  while j <= n do
    local o = o0 + 1 + 5 * (j - 1)
    repeat -- once; break skips the rule
      if pass == 2 and out[o + 1] == 0 then break end
      local cost, g = tonumber(ARGV[a + 2 * j]), tonumber(ARGV[a + 2 * j + 1])
      local shadow = g < 0
      if shadow then g = -g end
      if g ~= group then
        local b = 3 + (g - 1) * 7
        fam, p1, p2, p3 = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
        p4, p5, p6 = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
        group = g
      end
      local s = 4 * (j - 1)
      local last, x, y, expires
      if pass == 1 then
        last, x, y, expires = 0, 0, 0, 0
        local raw = redis.call('GET', KEYS[k + j])
        if raw then
          -- load
        end
        S[s + 1], S[s + 2], S[s + 3], S[s + 4] = last, x, y, expires
      else
        last, x, y, expires = S[s + 1], S[s + 2], S[s + 3], S[s + 4]
        cost = 0
      end
      local t = now
      if t < last then t = last elseif t < 0 then t = 0 end -- effective_now

      local allowed, remaining, reset, retry, delay, nx, ny = false, 0, 0, 0, 0, nil, nil
      if fam == 0 then
        -- meter step
      else
        -- window step
      end

      if pass == 1 then
        if not allowed and not shadow then admitted = false end
        if nx then
          local w = 6 * writes
          W[w + 1], W[w + 2], W[w + 3], W[w + 4], W[w + 5], W[w + 6] = KEYS[k + j], t, nx, ny, expires, reset
          writes = writes + 1
        end
      end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed and 1 or 0, remaining, reset, retry, delay
    until true
    j = j + 1
    if j > n and pass == 1 and not admitted then pass, j = 2, 1 end
  end

  if admitted then
    for i = 0, writes - 1 do
      local w = 6 * i
      local key, t, nx, ny, expires, reset = W[w + 1], W[w + 2], W[w + 3], W[w + 4], W[w + 5], W[w + 6]
      -- store
    end
  else
    out[o0 + 1] = 0
  end
  k, a = k + n, a + 1 + 2 * n
end
return out
