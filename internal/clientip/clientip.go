// Package clientip finds the address of a request's client when it may
// have come through proxies: the peer's address, unless the peer is one of
// the configured trusted proxies, in which case X-Forwarded-For is
// believed as far as the trusted proxies go. The reverse proxy keys its
// limits by it, the control plane its invalid-key budget.
package clientip

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Of is the address of the client of a request from the peer remoteAddr
// (host:port, or a bare host) with headers h: the peer, unless it is
// among trusted, in which case X-Forwarded-For is walked from the right
// past the trusted proxies. An untrusted peer's X-Forwarded-For is
// ignored, so nobody can pose as another client by sending one; a
// malformed hop ends the walk at the last address believed. Addresses
// come without an IPv6 zone, IPv4 ones unmapped, so that one client has
// one name. The zero Addr means remoteAddr was no address.
func Of(remoteAddr string, h http.Header, trusted []netip.Prefix) netip.Addr {
	ip := peer(remoteAddr)
	if !ip.IsValid() || !Contains(trusted, ip) {
		return ip
	}
	hops := strings.Split(strings.Join(h.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return ip // a malformed hop: trust nothing beyond it
		}
		if a = a.Unmap().WithZone(""); !Contains(trusted, a) {
			return a
		}
		ip = a
	}
	return ip
}

// Trusted reports whether the peer remoteAddr (host:port, or a bare
// host) is among trusted: whether what it says of the client, its
// X-Forwarded-* headers, may be believed and passed on.
func Trusted(remoteAddr string, trusted []netip.Prefix) bool {
	ip := peer(remoteAddr)
	return ip.IsValid() && Contains(trusted, ip)
}

// peer is the address of remoteAddr, without a zone and unmapped; the
// zero Addr when it is none.
func peer(remoteAddr string) netip.Addr {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap().WithZone("")
}

// IPv6Network is how many leading bits of an IPv6 address name one client
// by default: a /64, the network one host or home is given, within which
// it may pick a new address for each request (privacy addresses, or any
// at will), so that counting by the address alone would not bound it.
const IPv6Network = 64

// Name is the name a client of address a is counted by: an IPv4 address
// as it is, an IPv6 one as its network of v6bits bits ("2001:db8:1:2::/64";
// the address alone when v6bits is 128 or more, or 0 or less). The zero
// Addr is "".
func Name(a netip.Addr, v6bits int) string {
	if !a.IsValid() {
		return ""
	}
	if a.Is4() || v6bits <= 0 || v6bits >= 128 {
		return a.String()
	}
	return netip.PrefixFrom(a, v6bits).Masked().String()
}

// Contains reports whether one of prefixes holds a.
func Contains(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses comma-separated CIDRs or addresses (a bare address
// is a /32 or /128), as the -trusted-proxies flags take them.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
