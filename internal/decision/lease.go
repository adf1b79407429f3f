package decision

import (
	"hash/fnv"
	"strconv"

	"github.com/sluicehq/sluice/internal/decide"
)

// LeaseID maps a caller's lease name to the 53-bit id engines store (Lua
// numbers are exact below 2^53); "" is lease 0, a new lease of the
// decider's choosing. A name of LeaseName's form is the id it names.
func LeaseID(name string) int64 {
	if name == "" {
		return 0
	}
	if len(name) == 1+leaseDigits && name[0] == '~' {
		if id, err := strconv.ParseInt(name[1:], 16, 64); err == nil && id > 0 && id < 1<<53 {
			return id
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return max(int64(h.Sum64()>>11), 1)
}

// leaseDigits is the length of LeaseName's hexadecimal id.
const leaseDigits = 14

// LeaseName names lease id, a lease the decider chose (decide.NewLease),
// for the caller to release it: "~" and 14 hexadecimal digits.
func LeaseName(id int64) string {
	const hex = "0123456789abcdef"
	var b [1 + leaseDigits]byte
	b[0] = '~'
	for i := leaseDigits; i > 0; i-- {
		b[i] = hex[id&15]
		id >>= 4
	}
	return string(b[:])
}

// HeldLease is the name of the lease dec holds, "" for none: the name
// the caller gave, else the decider's lease's.
func HeldLease(dec decide.Decision, name string) string {
	switch {
	case dec.Lease == 0:
		return ""
	case name != "":
		return name
	}
	return LeaseName(dec.Lease)
}
