-- lease.lua: concurrency leases (limit.acquire, limit.Limiter.Release).
-- ext holds lease, expiry, cost triples in the order taken or renewed.

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

local function acquire(p, s, now, cost, lease)
  now = effective_now(s.t, now)
  local leases = live_leases(s.ext, now, lease)
  local held_cost, held = held_lease(s.ext, now, lease)
  local inflight = 0
  for i = 3, #leases, 3 do inflight = inflight + leases[i] end
  local r = result(p.shown)
  local ns = nil
  if held or inflight + cost <= p.limit then
    r.allowed = true
    local c = cost
    if held then c = held_cost end
    inflight = inflight + c
    leases[#leases + 1] = lease; leases[#leases + 1] = now + p.lease_ttl; leases[#leases + 1] = c
    ns = {t = now, x = 0, y = 0, ext = leases}
  else
    local freed, at = 0, 0
    for i = 1, #leases, 3 do
      freed = freed + leases[i + 2]
      at = math.max(at, leases[i + 1])
      if inflight - freed + cost <= p.limit then
        r.retry = at - now
        break
      end
    end
  end
  r.remaining = p.limit - inflight
  for i = 2, #leases, 3 do r.reset = math.max(r.reset, leases[i] - now) end
  return ns, r
end
