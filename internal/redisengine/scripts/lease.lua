-- lease.lua: concurrency leases (limit.acquire, limit.Limiter.Release).
-- ext holds lease, expiry, cost triples in the order taken or renewed. An
-- adaptive rule's (alg 9) x is the fleet's limit its updater set (0: none,
-- the rule's own stands) and y the leases expired unreleased since the
-- updater took them. A partitioned adaptive rule's lease keeps its
-- partition in its cost (cost + partition × PART), and each partition's
-- last request leaves a marker: lease -(partition + 1), of cost 0, until
-- a window later; the partition is active while it has one.

local PART = 1048576

local function live_leases(ext, now, skip)
  local out = {}
  for i = 1, #ext - 2, 3 do
    if ext[i + 1] > now and ext[i] ~= skip then
      out[#out + 1] = ext[i]; out[#out + 1] = ext[i + 1]; out[#out + 1] = ext[i + 2]
    end
  end
  return out
end

local function held_lease(ext, now, lease)
  for i = 1, #ext - 2, 3 do
    if ext[i] == lease and ext[i + 1] > now then return ext[i + 2], true end
  end
  return 0, false
end

local function expired_leases(ext, now)
  local n = 0
  for i = 1, #ext - 2, 3 do if ext[i] > 0 and ext[i + 1] <= now then n = n + 1 end end
  return n
end

-- over_share reports whether a lease of cost for partition p.part would
-- take room that an active partition below its share may claim: a
-- partition takes its share while it wants it, and borrows only what the
-- others leave idle. leases are the live ones, the request's own aside.
local function over_share(p, leases, limit, inflight, cost)
  local own, active = {}, {}
  local rest = 1
  for q = 1, #p.shares do rest = rest - p.shares[q] end
  local function share(q)
    if q == 0 then return math.max(rest, 0) end
    return p.shares[q]
  end
  for q = 0, #p.shares do own[q] = 0 end
  for i = 1, #leases, 3 do
    if leases[i] < 0 then
      active[-leases[i] - 1] = true
    else
      local q = math.floor(leases[i + 2] / PART)
      own[q] = (own[q] or 0) + leases[i + 2] % PART
      active[q] = true
    end
  end
  if own[p.part] + cost <= math.floor(share(p.part) * limit + 0.5) then return false end
  local reserve = 0
  for q = 0, #p.shares do
    if q ~= p.part and active[q] then reserve = reserve + math.max(0, math.floor(share(q) * limit + 0.5) - own[q]) end
  end
  return inflight + cost + reserve > limit
end

-- mark returns leases with partition p.part's marker renewed, to a window
-- from now.
local function mark(p, leases, now)
  local out, id = {}, -(p.part + 1)
  for i = 1, #leases, 3 do
    if leases[i] ~= id then
      out[#out + 1] = leases[i]; out[#out + 1] = leases[i + 1]; out[#out + 1] = leases[i + 2]
    end
  end
  out[#out + 1] = id; out[#out + 1] = now + p.window; out[#out + 1] = 0
  return out
end

local function acquire(p, s, now, cost, lease)
  now = effective_now(s.t, now)
  local leases = live_leases(s.ext, now, lease)
  local held_cost, held = held_lease(s.ext, now, lease)
  local inflight = 0
  for i = 3, #leases, 3 do inflight = inflight + leases[i] % PART end
  local r = result(p.shown)
  local limit, x, y = p.limit, 0, 0
  if p.alg == 9 then
    x, y = s.x, s.y + expired_leases(s.ext, now)
    if x > 0 then limit = x end
    r.limit = limit
  end
  local stored, over = cost, false
  if p.shares then
    stored = cost + p.part * PART
    over = not held and cost > 0 and over_share(p, leases, limit, inflight, cost)
    if cost > 0 then leases = mark(p, leases, now) end
  end
  local ns = nil
  if held or (not over and inflight + cost <= limit) then
    r.allowed = true
    local c = stored
    if held then c = held_cost end
    inflight = inflight + c % PART
    leases[#leases + 1] = lease; leases[#leases + 1] = now + p.lease_ttl; leases[#leases + 1] = c
    ns = {t = now, x = x, y = y, ext = leases}
  else
    local freed, at = 0, 0
    for i = 1, #leases, 3 do
      freed = freed + leases[i + 2] % PART
      at = math.max(at, leases[i + 1])
      if inflight - freed + cost <= limit then
        r.retry = at - now
        break
      end
    end
    -- A rejected partition is active all the same: its marker is kept.
    if p.shares and cost > 0 then r.touch = {t = now, x = x, y = y, ext = leases} end
  end
  r.remaining = limit - inflight
  for i = 2, #leases, 3 do r.reset = math.max(r.reset, leases[i] - now) end
  return ns, r
end
