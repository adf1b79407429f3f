-- decide.lua: decisions, each all or nothing, mirroring limit.Engine.AllowAll.
--
-- KEYS: one counter key per rule, all in one cluster slot.
-- ARGV[1]: now in µs, or "" to use Redis TIME.
-- ARGV[2]: SLACK (see common.lua). ARGV[3]: minimum TTL in ms.
-- ARGV[4]: "check"; "release" (one key: end the lease of rule 1);
--   "adapt" (one key: set an adaptive rule's limit, below);
--   "refund": undo an admitted check of these rules at the same now (a
--   decision spanning cluster slots was rejected in another slot); or
--   "checks": several independent checks, decided one after another (the
--   batching flusher merges a pipeline's checks into one call: Redis's cost
--   of a call, this script's function definitions above all, is then paid
--   once per pipeline). ARGV[5] is their number; each has its count of
--   rules, then their fields, and the next of KEYS.
-- ARGV[5 ...] (other ops): per rule, STRIDE fields: algorithm, cost, lease,
--   shadow, capacity, shown, limit, window, interval, per_us, bound, gran,
--   buckets, lease_ttl, warm (0/1), stable, threshold, max_permits, slope,
--   cool_down. A calendar window's window is -1 and its four edges
--   (limit.CalendarEdges) stand in interval, per_us, bound and gran, of
--   no use to a fixed window.
-- State: a MessagePack array {t, x, y, ext...}; the key expires once the
-- state equals a fresh one (the answer's reset), or after the minimum TTL
-- (the flat scripts may keep it longer: flat.lua).
-- Reply: {admitted (0/1), then per rule: allowed (0/1), limit, remaining,
--   reset µs, retry µs (-1: never), delay µs}; for "checks", the replies of
--   each check in turn.

local min_ttl = tonumber(ARGV[3])
local op = ARGV[4]
local STRIDE = 21

-- parse reads n rules whose fields start after ARGV[o]. (Written out:
-- Redis runs this on every call, and a helper closure per rule cost more
-- than the fields' parsing.)
local function parse(n, o)
  local rules = {}
  for i = 1, n do
    local b = o + (i - 1) * STRIDE
    local p = {alg = tonumber(ARGV[b + 1]), cost = tonumber(ARGV[b + 2]), lease = tonumber(ARGV[b + 3]),
      shadow = ARGV[b + 4] == '1', capacity = tonumber(ARGV[b + 5]), shown = tonumber(ARGV[b + 6]),
      limit = tonumber(ARGV[b + 7]), window = tonumber(ARGV[b + 8]), interval = tonumber(ARGV[b + 9]),
      per_us = tonumber(ARGV[b + 10]), bound = tonumber(ARGV[b + 11]), gran = tonumber(ARGV[b + 12]),
      buckets = tonumber(ARGV[b + 13]), lease_ttl = tonumber(ARGV[b + 14]), spent = tonumber(ARGV[b + 21])}
    p.queue = p.alg == 3
    if p.alg == 9 and ARGV[b + 12] ~= '0' then -- partitions: "of:share1:share2…"
      local v = {}
      for f in string.gmatch(ARGV[b + 12], '[^:]+') do v[#v + 1] = tonumber(f) end
      p.part, p.shares = v[1], {}
      for q = 2, #v do p.shares[q - 1] = v[q] end
    end
    if p.window < 0 then p.edges = {p.interval, p.per_us, p.bound, p.gran} end
    if ARGV[b + 15] == '1' then
      p.warm = {stable = tonumber(ARGV[b + 16]), threshold = tonumber(ARGV[b + 17]), max = tonumber(ARGV[b + 18]),
        slope = tonumber(ARGV[b + 19]), cool_down = tonumber(ARGV[b + 20])}
    end
    rules[i] = p
  end
  return rules
end

local function load(key)
  local raw = redis.call('GET', key)
  local s = {t = 0, x = 0, y = 0, ext = {}}
  if raw and string.byte(raw) == 193 then -- the flat scripts' encoding (flat.lua)
    local _
    _, s.t, s.x, s.y = struct.unpack('<Bdddd', raw)
  elseif raw then
    local arr = cmsgpack.unpack(raw)
    s.t, s.x, s.y = arr[1], arr[2], arr[3]
    -- A lone negative fourth value is a record of the key's expiry the
    -- flat scripts once wrote (flat.lua), no part of a state (leases come
    -- in threes, and a partition's marker is a negative lease).
    if not (#arr == 4 and arr[4] < 0) then
      for i = 4, #arr do s.ext[i - 3] = arr[i] end
    end
  end
  return s
end

local function store(key, s, reset)
  local arr = {s.t, s.x, s.y}
  if s.ext then
    for i = 1, #s.ext do arr[3 + i] = s.ext[i] end
  end
  redis.call('SET', key, cmsgpack.pack(arr), 'PX', math.max(math.ceil(reset / 1000), min_ttl))
end

-- limit.Limiter.step
local function evaluate(p, s, cost)
  local alg = p.alg
  if alg == 1 and p.warm then return warming_bucket(p, s, now, cost) end
  if alg <= 3 then return meter(p, s, now, cost) end
  if alg == 4 then return fixed_window(p, s, now, cost) end
  if alg == 5 then return sliding_log(p, s, now, cost) end
  if alg == 6 then return sliding_window(p, s, now, cost) end
  if alg == 7 then return sliding_buckets(p, s, now, cost) end
  return acquire(p, s, now, cost, p.lease)
end

-- limit.Limiter.Step: the new state only for an admitted positive cost.
local function step(p, s)
  if p.cost <= 0 or p.cost > p.capacity then
    local _, r = evaluate(p, s, 0)
    if p.cost ~= 0 then r.allowed = false; r.retry = -1; r.delay = 0 end
    return nil, r
  end
  return evaluate(p, s, p.cost)
end

-- check decides rules over keys, all or nothing, and appends its reply to
-- reply.
local function check(keys, rules, reply)
  local pending, before, after, res = {}, {}, {}, {}
  local admitted = true
  for i, p in ipairs(rules) do
    local key = keys[i]
    local s = pending[key] or load(key)
    before[i] = s
    local ns, r = step(p, s)
    res[i] = r
    if ns then after[i] = ns; pending[key] = ns end
    if not r.allowed and not p.shadow then admitted = false end
  end

  if admitted then
    local last = {}
    for i = 1, #rules do if after[i] then last[keys[i]] = i end end
    for i = 1, #rules do
      if after[i] and last[keys[i]] == i then store(keys[i], after[i], res[i].reset) end
    end
  else
    -- Nothing was consumed: rules that would have admitted answer from
    -- their untouched state. A partition rejected keeps its mark of
    -- activity (lease.lua).
    for i, p in ipairs(rules) do
      if res[i].allowed then
        local _, r = evaluate(p, before[i], 0)
        res[i] = r
      elseif res[i].touch then
        store(keys[i], res[i].touch, math.max(res[i].reset, p.window))
      end
    end
  end

  reply[#reply + 1] = admitted and 1 or 0
  for i = 1, #rules do
    local r = res[i]
    local n = #reply
    reply[n + 1] = r.allowed and 1 or 0
    reply[n + 2] = r.limit
    reply[n + 3] = r.remaining
    reply[n + 4] = r.reset
    reply[n + 5] = r.retry
    reply[n + 6] = r.delay
  end
  return reply
end

if op == 'checks' then
  local reply, k, o = {}, 0, 5
  for _ = 1, tonumber(ARGV[5]) do
    local n = tonumber(ARGV[o + 1])
    local keys = {}
    for i = 1, n do keys[i] = KEYS[k + i] end
    check(keys, parse(n, o + 1), reply)
    k, o = k + n, o + 1 + n * STRIDE
  end
  return reply
end

local rules = parse(#KEYS, 4)

-- "adapt" (one key, an adaptive concurrency rule's): its updater sets
-- the fleet's limit to the request's cost (0: leaves it) and takes the
-- count of leases that expired unreleased. The state lives at least ten
-- of the rule's windows, so that an idle backend keeps its limit.
-- Reply: {the limit before, the expired leases taken}.
if op == 'adapt' then
  local key, p = KEYS[1], rules[1]
  local s = load(key)
  local t = effective_now(s.t, now)
  local x, y = s.x, s.y + expired_leases(s.ext, t)
  local ns = {t = t, x = x, y = 0, ext = live_leases(s.ext, t, -1)}
  if p.cost > 0 then ns.x = p.cost end
  local _, r = evaluate(p, ns, 0)
  store(key, ns, math.max(r.reset, 10 * p.window))
  return {x, y}
end

if op == 'release' then
  local key, p = KEYS[1], rules[1]
  if redis.call('EXISTS', key) == 1 then
    local s = load(key)
    local t = effective_now(s.t, now)
    local ns = {t = t, x = 0, y = 0, ext = live_leases(s.ext, t, p.lease)}
    if p.alg == 9 then ns.x, ns.y = s.x, s.y + expired_leases(s.ext, t) end
    local _, r = evaluate(p, ns, 0)
    store(key, ns, r.reset)
  end
  return {1}
end

-- Refunds keep each key's expiry (KEEPTTL): the state only shrinks.
local function refund(p, key)
  if redis.call('EXISTS', key) == 0 then return end
  local s = load(key)
  local t, cost = effective_now(s.t, now), p.cost
  local alg = p.alg
  if alg <= 3 then
    local back = cost * p.interval
    if p.warm then
      back = cost * p.warm.stable -- the stored permits taken are not known: refund at the stable rate
      s.y = math.max(s.y - cost, 0)
    end
    s.x = math.max(s.x - back, 0)
  elseif alg == 4 or alg == 6 then
    if window_of(s.t, p) == window_of(t, p) then s.x = math.max(s.x - cost, 0) end
  elseif alg == 7 then
    local b = math.floor(t / p.gran)
    if math.floor(s.t / p.gran) == b and #s.ext == p.buckets then
      local i = b % p.buckets + 1
      s.ext[i] = math.max(s.ext[i] - cost, 0)
    end
  elseif alg == 5 then
    for i = #s.ext - 1, 1, -2 do
      if s.ext[i] == t then
        s.ext[i + 1] = s.ext[i + 1] - cost
        if s.ext[i + 1] <= 0 then table.remove(s.ext, i + 1); table.remove(s.ext, i) end
        break
      end
    end
  else
    if alg == 9 then s.y = s.y + expired_leases(s.ext, t) end
    s.ext = live_leases(s.ext, t, p.lease)
  end
  local arr = {s.t, s.x, s.y}
  for i = 1, #s.ext do arr[3 + i] = s.ext[i] end
  redis.call('SET', key, cmsgpack.pack(arr), 'KEEPTTL')
end

if op == 'refund' then
  for i, p in ipairs(rules) do
    if p.cost > 0 then refund(p, KEYS[i]) end
  end
  return {1}
end

return check(KEYS, rules, {})
