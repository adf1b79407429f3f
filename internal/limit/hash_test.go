package limit

import (
	"fmt"
	"testing"
)

// Distinct keys of every length, and keys differing in one byte anywhere,
// get distinct hashes; the seed changes every hash.
func TestHashStringSpreads(t *testing.T) {
	t.Parallel()
	seen := make(map[uint64]string)
	add := func(k string) {
		h := hashString(42, k)
		if prev, dup := seen[h]; dup {
			t.Fatalf("%q and %q collide", prev, k)
		}
		seen[h] = k
	}
	for n := range 70 {
		base := []byte(fmt.Sprintf("%070d", 0)[:n])
		add(string(base))
		for i := range base {
			for _, c := range []byte{'1', 'x', 0} {
				b := append([]byte(nil), base...)
				b[i] = c
				if string(b) != string(base) {
					if _, ok := seen[hashString(42, string(b))]; !ok {
						add(string(b))
					}
				}
			}
		}
	}
	for i := range 200_000 {
		add(benchKey(i))
	}
	if hashString(1, "k") == hashString(2, "k") {
		t.Fatal("the seed does not change the hash")
	}
}

func BenchmarkHashString(b *testing.B) {
	k := benchKey(42)
	var sink uint64
	for b.Loop() {
		sink += hashString(7, k)
	}
	_ = sink
}
