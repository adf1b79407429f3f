-- log.lua: the sliding log (limit.slidingLog). ext holds time, cost pairs
-- in time order.

local function sliding_log(p, s, now, cost)
  now = effective_now(s.t, now)
  local log = s.ext
  local first = 1
  while first + 1 <= #log and log[first] <= now - p.window do first = first + 2 end
  local sum = 0
  for i = first + 1, #log, 2 do sum = sum + log[i] end
  local r = result(p.shown)
  local ns = nil
  local live = {}
  for i = first, #log do live[#live + 1] = log[i] end
  if sum + cost <= p.limit then
    r.allowed = true
    sum = sum + cost
    local m = #live
    if m >= 2 and live[m - 1] == now then
      live[m] = live[m] + cost
    else
      live[m + 1] = now
      live[m + 2] = cost
    end
    ns = {t = now, x = 0, y = 0, ext = live}
  else
    local freed = 0
    for i = 1, #live, 2 do
      freed = freed + live[i + 1]
      if sum - freed + cost <= p.limit then
        r.retry = live[i] + p.window - now
        break
      end
    end
  end
  r.remaining = p.limit - sum
  if #live >= 2 then r.reset = live[#live - 1] + p.window - now end
  return ns, r
end
