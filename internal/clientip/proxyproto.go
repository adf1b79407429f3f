package clientip

import (
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
)

// ProxyProtocol makes ln read the PROXY protocol header (v1 or v2) that
// the load balancers in balancers open each connection with: such a
// connection's remote address, and so the client address Of finds, is the
// one its header names, and one without a header is closed at its
// first read (a balancer not sending it is a misconfiguration that would
// count every client as one). Connections from anywhere else are served as
// they come: a PROXY header one of them sends is not read as one, so it is
// no way to pose as another client. No balancers: ln itself.
func ProxyProtocol(ln net.Listener, balancers []netip.Prefix) net.Listener {
	if len(balancers) == 0 {
		return ln
	}
	return &proxyproto.Listener{Listener: ln, ReadHeaderTimeout: 10 * time.Second,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			ap, err := netip.ParseAddrPort(o.Upstream.String())
			if err == nil && Contains(balancers, ap.Addr().Unmap().WithZone("")) {
				return proxyproto.REQUIRE, nil
			}
			return proxyproto.SKIP, nil
		}}
}
