-- flat.lua: the flat scripts, which decide the commonest decisions, one
-- rule each, for a fraction of decide.lua's Redis CPU: this loop with the
-- step of an algorithm family (single.lua, window1.lua) put in place of
-- the line "-- step", and store.lua of "-- store" (see flatScript). They decide every key they are
-- given, independently (the batching flusher merges a pipeline's calls of
-- one of them into one call: Redis's cost of a call is then paid once per
-- pipeline). Redis runs a script's whole body on every call, making a
-- closure of every function it defines and a table of every {}, so these
-- are written out flat: no functions, and no tables but the reply and the
-- states they pack.
--
-- KEYS: the counter keys, one per decision.
-- ARGV: now µs (or "" for Redis TIME), minimum TTL ms; then for each key
--   its cost and its parameter group (1-based); then the groups, 6 fields
--   each (the script's own). Decisions of one rule share a group, so a
--   merged call carries a rule's parameters once, not once per decision.
-- Reply: for each key in turn, 5 values: allowed (0/1), remaining, reset
--   µs, retry µs (-1: never), delay µs. The rule's limit, and whether it is
--   a shadow rule, are the decider's to add.
--
-- A step reads the group's fields p1 ... p6, the cost, the time t
-- (effective: never before last) and the state {last, x, y}, and sets
-- allowed, remaining, reset, retry and delay, and nx and ny, the new state,
-- when it changes (an admitted positive cost).
--
-- State: {t, x, y} and the earliest time (ms, Redis's clock; 0: unknown)
-- the key can expire, written by these scripts as the byte 0xC1 (which
-- never starts MessagePack) and four little-endian doubles: struct's pack
-- and unpack cost Redis a third of cmsgpack's, which makes no table.
-- decide.lua and sync.lua write a MessagePack array {t, x, y, ...}, once
-- also with a fourth value, minus that expiry; every script reads both
-- (load.lua), so a key may be reached by any of them.
--
-- On Redis's clock, a write that needs no later expiry than its key's keeps
-- it (KEEPTTL): setting an expiry costs Redis as much as the rest of a
-- write. One that needs a later one sets twice what it needs, or a minute
-- more when that is less, so that a busy key sets its expiry about once
-- per its needed lifetime (or per minute), and keys outlive their state by
-- at most that lifetime or a minute (harmless: see Config.MinTTL). With a
-- clock given (tests, replays) every write sets just its own expiry.

local min_ttl = tonumber(ARGV[2])
local redis_clock = ARGV[1] == ''
local now_ms = math.floor(now / 1000) -- at most Redis's time now
local groups_at, group = 2 + 2 * #KEYS, 0
local p1, p2, p3, p4, p5, p6
local out = {}
for i = 1, #KEYS do
  local key, a = KEYS[i], 2 * i
  local cost, g = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  if g ~= group then
    local b = groups_at + (g - 1) * 6
    p1, p2, p3 = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
    p4, p5, p6 = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    group = g
  end

  local last, x, y, expires = 0, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    -- load
  end
  local t = now
  if t < last then t = last elseif t < 0 then t = 0 end -- effective_now

  local allowed, remaining, reset, retry, delay, nx, ny = false, 0, 0, 0, 0, nil, nil
  -- step

  if nx then
    -- store
  end
  local o = #out
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed and 1 or 0, remaining, reset, retry, delay
end
return out
