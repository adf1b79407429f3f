-- load.lua: how flat.lua and multi.lua read a key's state, put in place of
-- their line "-- load": raw, the key's value (not nil), into last, x, y
-- and expires, in either encoding (see flat.lua).
do
  if string.byte(raw) == 193 then
    local _
    _, last, x, y, expires = struct.unpack('<Bdddd', raw)
  else
    local st = cmsgpack.unpack(raw)
    last, x, y = st[1], st[2], st[3]
    if st[4] and st[4] < 0 then expires = -st[4] end
  end
end
