package limit

import "math/bits"

// hashString is a seeded 64-bit hash of s in the manner of wyhash: 8-byte
// words folded with 128-bit multiplications. It costs about a third of
// hash/maphash.String on the short keys limiters use, most of whose cost is
// call layers. Seeded per Engine, its collisions cannot be aimed at.
func hashString(seed uint64, s string) uint64 {
	const (
		p0 = 0xa0761d6478bd642f
		p1 = 0xe7037ed1a0b428db
		p2 = 0x8ebc6af09c88c6e3
	)
	h := seed ^ p0 ^ uint64(len(s))*p1
	for len(s) > 48 {
		h = mix(le64(s)^p1, le64(s[8:])^h) ^ mix(le64(s[16:])^p2, le64(s[24:])^h) ^ mix(le64(s[32:])^p0, le64(s[40:])^h)
		s = s[48:]
	}
	if len(s) > 16 { // up to three independent lanes, so the multiplications overlap
		x := mix(le64(s)^p1, le64(s[8:])^h)
		if len(s) > 32 {
			x ^= mix(le64(s[16:])^p2, le64(s[24:])^h)
		}
		h = x
		s = s[len(s)-16:] // the tail overlaps; its bytes are mixed once more below
	}
	var a, b uint64
	switch {
	case len(s) >= 8:
		a = le64(s)
		b = le64(s[len(s)-8:])
	case len(s) >= 4:
		a = le32(s)
		b = le32(s[len(s)-4:])
	case len(s) > 0:
		a = uint64(s[0])<<16 | uint64(s[len(s)>>1])<<8 | uint64(s[len(s)-1])
	}
	return mix(mix(a^p1, b^h)^p2, h^p0)
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 and le32 read little-endian words; the compiler merges the byte
// loads into one.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
