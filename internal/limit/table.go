package limit

// table is an open-addressing hash table of slots keyed by their 64-bit key
// hash: linear probing, backward-shift deletion, no tombstones. Key hashes
// are uniformly random already, so the low bits index the table directly
// (the engine's shard choice uses the high bits). h == 0 marks an empty
// slot; Engine.hash never returns 0. The zero table is empty and usable.
type table struct {
	slots []slot // len is 0 or a power of two
	n     int    // occupied slots
}

const minTableSize = 8

// find returns the index of h's slot and true, or the index where h would
// be inserted and false. The table must not be full (insert grows it).
func (t *table) find(h uint64) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.slots[i].h {
		case h:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

// insert stores s (s.h ≠ 0, absent from the table) and returns its index,
// growing the table to keep it at most three quarters full.
func (t *table) insert(s slot) int {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, _ := t.find(s.h)
	t.slots[i] = s
	t.n++
	return i
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(minTableSize, 2*len(old)))
	for _, s := range old {
		if s.h != 0 {
			i, _ := t.find(s.h)
			t.slots[i] = s
		}
	}
}

// removeAt empties slot i, shifting later entries of its probe run back so
// that every remaining key stays reachable from its home slot.
func (t *table) removeAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].h != 0; j = (j + 1) & mask {
		home := int(t.slots[j].h) & mask
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && (home <= i || home > j) || i > j && home <= i && home > j {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}
