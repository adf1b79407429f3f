package checkapi

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
)

// parse reads the commonest check bodies without the JSON decoder's
// reflection and maps: one object of "tier", "descriptors" (an object of
// strings), "cost", "lease" and "release", each at most once and named in
// lower case, strings of printable ASCII without escapes, the cost a plain
// integer, JSON's whitespace anywhere between. It says whether it could;
// any other body, valid or not, is the decoder's, which then answers as it
// would have for one parse reads (FuzzCheckBody, FuzzParseCheckBody). The
// strings share one allocation, the descriptors another. c changes only
// when parse reads b.
func (c *checkBody) ParseFast(b []byte) bool {
	p := bodyParser{b: b}
	var seen uint8
	p.space()
	if !p.skip('{') {
		return false
	}
	if p.space(); p.skip('}') {
		if !p.end() {
			return false
		}
		*c = checkBody{fast: true}
		return true
	}
	var descs [8][4]int // the descriptors' key and value, as offsets in b
	nd := 0
	var tier, lease [2]int
	var cost int64
	var release bool
	for {
		p.space()
		name, ok := p.str()
		if !ok {
			return false
		}
		if p.space(); !p.skip(':') {
			return false
		}
		p.space()
		var bit uint8
		switch string(b[name[0]:name[1]]) {
		case "tier":
			bit = 1
			tier, ok = p.str()
		case "descriptors":
			bit = 2
			if nd, ok = p.descriptors(descs[:]); !ok {
				return false
			}
		case "cost":
			bit = 4
			cost, ok = p.int()
		case "lease":
			bit = 8
			lease, ok = p.str()
		case "release":
			bit = 16
			release, ok = p.bool()
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		p.space()
		if p.skip(',') {
			continue
		}
		if !p.skip('}') || !p.end() {
			return false
		}
		break
	}
	s := string(b) // one copy; the strings are its slices
	*c = checkBody{Tier: s[tier[0]:tier[1]], Cost: cost, Lease: s[lease[0]:lease[1]], Release: release, fast: true}
	c.parsed = make(policy.Descriptors, nd)
	for i, d := range descs[:nd] {
		c.parsed[i] = policy.Descriptor{Key: s[d[0]:d[1]], Value: s[d[2]:d[3]]}
	}
	slices.SortFunc(c.parsed, func(a, b policy.Descriptor) int { return strings.Compare(a.Key, b.Key) })
	return true
}

// bodyParser reads JSON tokens from b at i.
type bodyParser struct {
	b []byte
	i int
}

func (p *bodyParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// skip consumes c if it comes next.
func (p *bodyParser) skip(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end says whether only whitespace is left.
func (p *bodyParser) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string of printable ASCII without escapes and returns where
// its contents start and end.
func (p *bodyParser) str() ([2]int, bool) {
	if !p.skip('"') {
		return [2]int{}, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return [2]int{start, p.i - 1}, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return [2]int{}, false
		}
	}
	return [2]int{}, false
}

// descriptors reads an object of strings into dst, at most len(dst) of
// them with distinct keys, and returns how many.
func (p *bodyParser) descriptors(dst [][4]int) (int, bool) {
	if !p.skip('{') {
		return 0, false
	}
	if p.space(); p.skip('}') {
		return 0, true
	}
	n := 0
	for {
		if n == len(dst) {
			return 0, false
		}
		p.space()
		k, ok := p.str()
		if !ok {
			return 0, false
		}
		if p.space(); !p.skip(':') {
			return 0, false
		}
		p.space()
		v, ok := p.str()
		if !ok {
			return 0, false
		}
		for _, d := range dst[:n] {
			if string(p.b[d[0]:d[1]]) == string(p.b[k[0]:k[1]]) {
				return 0, false // a duplicate: the decoder's to refuse
			}
		}
		dst[n] = [4]int{k[0], k[1], v[0], v[1]}
		n++
		p.space()
		if p.skip(',') {
			continue
		}
		return n, p.skip('}')
	}
}

// int reads an integer without sign or leading zeros, or a negative one,
// of at most 18 digits (no overflow).
func (p *bodyParser) int() (int64, bool) {
	neg := p.skip('-')
	start := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	switch {
	case n == 0 || n > 18 || n > 1 && p.b[start] == '0':
		return 0, false
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return 0, false
	case neg:
		if v == 0 {
			return 0, false // -0: the decoder's
		}
		return -v, true
	}
	return v, true
}

func (p *bodyParser) bool() (bool, bool) {
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true, true
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return false, true
	}
	return false, false
}
