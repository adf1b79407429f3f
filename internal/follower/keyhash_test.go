package follower

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// TestKeyHashesAreTheHashes: remembered or not, a key's hash is its own,
// with five keys to a slot, and keys that differ in one byte or in length.
func TestKeyHashesAreTheHashes(t *testing.T) {
	t.Parallel()
	m := newKeyHashes()
	keys := make([]string, 5*memoSlots)
	for i := range keys {
		keys[i] = "sk_check_" + strconv.Itoa(i)
	}
	keys = append(keys, "sk_check_1x", "sk_check_", "sk_check_0\x00")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 4 * len(keys) {
		k := keys[rng.IntN(len(keys))]
		if m.of(k) != policy.HashKey(k) {
			t.Fatalf("%q: not its hash", k)
		}
	}
}
