-- lease.lua: concurrency leases (limit.acquire, limit.Limiter.Release).
-- ext holds lease, expiry, cost triples in the order taken or renewed. An
-- adaptive rule's (alg 9) x is the fleet's limit its updater set (0: none,
-- the rule's own stands) and y the leases expired unreleased since the
-- updater took them.

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
  for i = 2, #ext, 3 do if ext[i] <= now then n = n + 1 end end
  return n
end

local function acquire(p, s, now, cost, lease)
  now = effective_now(s.t, now)
  local leases = live_leases(s.ext, now, lease)
  local held_cost, held = held_lease(s.ext, now, lease)
  local inflight = 0
  for i = 3, #leases, 3 do inflight = inflight + leases[i] end
  local r = result(p.shown)
  local limit, x, y = p.limit, 0, 0
  if p.alg == 9 then
    x, y = s.x, s.y + expired_leases(s.ext, now)
    if x > 0 then limit = x end
    r.limit = limit
  end
  local ns = nil
  if held or inflight + cost <= limit then
    r.allowed = true
    local c = cost
    if held then c = held_cost end
    inflight = inflight + c
    leases[#leases + 1] = lease; leases[#leases + 1] = now + p.lease_ttl; leases[#leases + 1] = c
    ns = {t = now, x = x, y = y, ext = leases}
  else
    local freed, at = 0, 0
    for i = 1, #leases, 3 do
      freed = freed + leases[i + 2]
      at = math.max(at, leases[i + 1])
      if inflight - freed + cost <= limit then
        r.retry = at - now
        break
      end
    end
  end
  r.remaining = limit - inflight
  for i = 2, #leases, 3 do r.reset = math.max(r.reset, leases[i] - now) end
  return ns, r
end
