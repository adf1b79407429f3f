-- store.lua: how flat.lua and multi.lua write a key, put in place of their
-- line "-- store": key's new state {t, nx, ny} in the flat encoding (see
-- flat.lua), to live reset µs more and at least min_ttl ms, its expiry
-- kept when it is late enough. An expiry set now at ttl ms comes no
-- earlier than now_ms + ttl.
do
  local ttl = math.max(math.ceil(reset / 1000), min_ttl)
  if not redis_clock then
    redis.call('SET', key, struct.pack('<Bdddd', 193, t, nx, ny, 0), 'PX', ttl)
  elseif expires > now_ms + ttl then
    redis.call('SET', key, struct.pack('<Bdddd', 193, t, nx, ny, expires), 'KEEPTTL')
  else
    ttl = ttl + math.min(ttl, 60000)
    redis.call('SET', key, struct.pack('<Bdddd', 193, t, nx, ny, now_ms + ttl), 'PX', ttl)
  end
end
