package clientip

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestOfTrustsOnlyConfiguredProxies(t *testing.T) {
	t.Parallel()
	trusted, err := ParsePrefixes("10.0.0.0/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ remote, xff, want string }{
		{"203.0.113.9:1234", "", "203.0.113.9"},
		{"203.0.113.9:1234", "1.2.3.4", "203.0.113.9"},                     // an untrusted peer's header is ignored
		{"10.1.2.3:80", "198.51.100.4", "198.51.100.4"},                    // a trusted proxy's is believed
		{"10.1.2.3:80", "6.6.6.6, 198.51.100.4, 10.9.9.9", "198.51.100.4"}, // rightmost untrusted hop
		{"192.0.2.7:80", "garbage, 198.51.100.4", "198.51.100.4"},
		{"10.1.2.3:80", "garbage", "10.1.2.3"},
		{"10.1.2.3:80", "10.2.2.2", "10.2.2.2"}, // trusted all the way: the leftmost
		{"[::ffff:10.1.2.3]:80", "198.51.100.5", "198.51.100.5"},
		{"203.0.113.9", "", "203.0.113.9"}, // no port
	} {
		h := http.Header{}
		if tc.xff != "" {
			h.Set("X-Forwarded-For", tc.xff)
		}
		if got := Of(tc.remote, h, trusted); got != netip.MustParseAddr(tc.want) {
			t.Errorf("remote %s, XFF %q: %v, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
	// Two X-Forwarded-For lines are one list, the later line the nearer hops.
	h := http.Header{"X-Forwarded-For": {"198.51.100.7", "10.3.3.3"}}
	if got := Of("10.1.2.3:80", h, trusted); got != netip.MustParseAddr("198.51.100.7") {
		t.Errorf("two header lines: %v", got)
	}
	if got := Of("not-an-address", nil, trusted); got.IsValid() {
		t.Errorf("a peer that is no address: %v", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.1/8/8"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if p, err := ParsePrefixes(" , ::1 ,10.1.2.3/8"); err != nil || len(p) != 2 || p[1] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("blanks, a bare IPv6 address and an unmasked CIDR: %v %v", p, err)
	}
}

// FuzzOf: whatever a peer sends, the answer is the peer or one of the
// addresses in its X-Forwarded-For, and an untrusted peer's header is
// never believed.
func FuzzOf(f *testing.F) {
	f.Add("10.1.2.3:80", "198.51.100.4, 10.9.9.9")
	f.Add("203.0.113.9:1", "1.2.3.4")
	f.Add("[::ffff:10.0.0.1]:5", " ::1 ,garbage,,")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		h := http.Header{"X-Forwarded-For": {xff}}
		got := Of(remote, h, trusted)
		peer := Of(remote, nil, nil)
		if !got.IsValid() {
			if peer.IsValid() {
				t.Fatalf("no answer for the peer %v", peer)
			}
			return
		}
		if !Contains(trusted, peer) {
			if got != peer {
				t.Fatalf("an untrusted peer %v posed as %v", peer, got)
			}
			return
		}
		if got.Zone() != "" || got.Is4In6() {
			t.Fatalf("%v: a zone or a mapped IPv4 address", got)
		}
		if n := Name(got, IPv6Network); got.Is6() {
			if p, err := netip.ParsePrefix(n); err != nil || p.Bits() != IPv6Network || !p.Contains(got) {
				t.Fatalf("%v named %q: not its /64", got, n)
			}
		} else if n != got.String() {
			t.Fatalf("%v named %q", got, n)
		}
		if got == peer {
			return
		}
		for _, hop := range strings.Split(xff, ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(hop)); err == nil && a.Unmap().WithZone("") == got {
				return
			}
		}
		t.Fatalf("%v is neither the peer %v nor in %q", got, peer, xff)
	})
}

// A client is named by its IPv4 address, or by its IPv6 network: the
// addresses a host may pick within its /64 share one name, another
// network's do not; 128 bits (or 0) name the address alone.
func TestNameGroupsIPv6Networks(t *testing.T) {
	for _, c := range []struct {
		addr string
		bits int
		want string
	}{
		{"198.51.100.7", 64, "198.51.100.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", 64, "2001:db8:1:3::/64"},
		{"2001:db8:1:2:ffff::1", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2::1", 128, "2001:db8:1:2::1"},
		{"2001:db8:1:2::1", 0, "2001:db8:1:2::1"},
		{"::1", 64, "::/64"},
	} {
		if got := Name(netip.MustParseAddr(c.addr), c.bits); got != c.want {
			t.Errorf("Name(%s, %d) = %q, want %q", c.addr, c.bits, got, c.want)
		}
	}
	if got := Name(netip.Addr{}, 64); got != "" {
		t.Errorf("Name of no address = %q", got)
	}
}
