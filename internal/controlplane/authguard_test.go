package controlplane

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// clockedServer is newServerWith on a clock the test moves (ns since the
// epoch), from 2026-11-24 12:00 UTC.
func clockedServer(t *testing.T, edit func(*HandlerConfig)) (*httptest.Server, *atomic.Int64) {
	now := new(atomic.Int64)
	now.Store(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC).UnixNano())
	srv, _ := newServerWith(t, func(c *HandlerConfig) {
		edit(c)
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	return srv, now
}

// TestInvalidKeysLimited: an address that sends more invalid keys than its
// budget (5 a minute here) is refused, resource_exhausted, saying how long
// to wait, its valid keys too, until a token is back (12 s on the test's
// clock); the operator key still works, and another address is not
// affected.
func TestInvalidKeysLimited(t *testing.T) {
	t.Parallel()
	srv, now := clockedServer(t, func(c *HandlerConfig) { c.AuthFailures = 5 })
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	list := func(key string) error {
		_, err := call(key, c.tiers.ListTiers, &sluicev1.ListTiersRequest{})
		return err
	}
	for i := range 5 {
		if err := list("sk_admin_guess" + string(rune('a'+i))); codeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("invalid key %d: %v", i, err)
		}
	}
	err := list("sk_admin_guessf")
	if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "try again in 12s") {
		t.Fatalf("the 6th invalid key: %v", err)
	}
	if err := list(admin); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a valid key from the refused address: %v", err)
	}
	if _, err := call(operatorKey, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{}); err != nil {
		t.Fatalf("the operator key from the refused address: %v", err)
	}

	// Another address (127.0.0.2, also this machine) has its own budget.
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext
	other := sluicev1connect.NewTierServiceClient(&http.Client{Transport: tr}, srv.URL)
	if _, err := call("sk_admin_guessg", other.ListTiers, &sluicev1.ListTiersRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("an invalid key from another address: %v", err)
	}
	if _, err := call(admin, other.ListTiers, &sluicev1.ListTiersRequest{}); err != nil {
		t.Fatalf("a valid key from another address: %v", err)
	}

	now.Add(int64(12 * time.Second))
	if err := list(admin); err != nil {
		t.Fatalf("a valid key 12 s later: %v", err)
	}
}

// TestInvalidKeysLimitedBehindProxy: behind a trusted proxy (127.0.0.1
// here) each caller named in X-Forwarded-For has its own budget, so one
// guessing caller does not lock out the others; from an untrusted peer
// (127.0.0.2) the header is ignored, so a guesser cannot renew its budget
// by sending a new address each time.
func TestInvalidKeysLimitedBehindProxy(t *testing.T) {
	t.Parallel()
	srv, _ := newServerWith(t, func(c *HandlerConfig) {
		c.AuthFailures = 3
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		// A clock that stands still: no token comes back during the test.
		at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
		c.Now = func() time.Time { return at }
	})
	_, admin := setupTenant(t, newClients(srv), "acme")
	tiers := func(local net.IP, forwardedFor string) sluicev1connect.TierServiceClient {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}).DialContext
		return sluicev1connect.NewTierServiceClient(&http.Client{Transport: forwarding{tr, forwardedFor}}, srv.URL)
	}
	list := func(c sluicev1connect.TierServiceClient, key string) connect.Code {
		_, err := call(key, c.ListTiers, &sluicev1.ListTiersRequest{})
		return codeOf(err)
	}
	proxied := func(client string) sluicev1connect.TierServiceClient {
		// The leftmost hop is what the caller itself claimed: not believed.
		return tiers(net.IPv4(127, 0, 0, 1), "203.0.113.77, "+client)
	}

	guesser := proxied("198.51.100.1")
	for i := range 3 {
		if code := list(guesser, "sk_admin_guess"+string(rune('a'+i))); code != connect.CodeUnauthenticated {
			t.Fatalf("invalid key %d through the proxy: %v", i, code)
		}
	}
	if code := list(guesser, "sk_admin_guessd"); code != connect.CodeResourceExhausted {
		t.Fatalf("the guesser's 4th invalid key: %v, want resource_exhausted", code)
	}
	if code := list(proxied("198.51.100.2"), admin); code != 0 {
		t.Fatalf("another caller through the same proxy: %v", code)
	}
	if code := list(proxied("198.51.100.2"), "sk_admin_typo"); code != connect.CodeUnauthenticated {
		t.Fatalf("another caller's own invalid key: %v", code)
	}
	// An IPv6 caller is its /64: a new address of its network for each
	// guess renews nothing; another network has its own budget.
	for i := range 3 {
		if code := list(proxied(fmt.Sprintf("2001:db8:7:7::%x", i+1)), "sk_admin_v6guess"+string(rune('a'+i))); code != connect.CodeUnauthenticated {
			t.Fatalf("invalid key %d from the IPv6 network: %v", i, code)
		}
	}
	if code := list(proxied("2001:db8:7:7:ffff::1"), admin); code != connect.CodeResourceExhausted {
		t.Fatalf("a fresh address of the guessing /64: %v, want resource_exhausted", code)
	}
	if code := list(proxied("2001:db8:7:8::1"), admin); code != 0 {
		t.Fatalf("the next /64: %v", code)
	}

	for i := range 3 {
		c := tiers(net.IPv4(127, 0, 0, 2), "198.51.100."+string(rune('3'+i)))
		if code := list(c, "sk_admin_other"+string(rune('a'+i))); code != connect.CodeUnauthenticated {
			t.Fatalf("invalid key %d from the untrusted peer: %v", i, code)
		}
	}
	if code := list(tiers(net.IPv4(127, 0, 0, 2), "198.51.100.9"), admin); code != connect.CodeResourceExhausted {
		t.Fatalf("the untrusted peer with a fresh X-Forwarded-For: %v, want resource_exhausted", code)
	}
}

// forwarding adds an X-Forwarded-For header to every request, as a proxy
// in front would.
type forwarding struct {
	next http.RoundTripper
	xff  string
}

func (f forwarding) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.xff)
	return f.next.RoundTrip(r)
}

// TestCallsLimitedPerKey: a key that makes more calls than its budget (4 a
// minute here) is refused, resource_exhausted with Retry-After, until a
// token is back (15 s on the test's clock); other keys, the operator's
// among them, have their own budgets, and deciders are not counted.
func TestCallsLimitedPerKey(t *testing.T) {
	t.Parallel()
	srv, now := clockedServer(t, func(c *HandlerConfig) { c.KeyCalls = 4 })
	c := newClients(srv)
	// Two tenants and their keys: the operator's 4 calls.
	_, admin := setupTenant(t, c, "acme")
	_, other := setupTenant(t, c, "globex")
	if _, err := call(operatorKey, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{}); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("the operator's 5th call: %v", err)
	}
	list := func(key string) error {
		_, err := call(key, c.tiers.ListTiers, &sluicev1.ListTiersRequest{})
		return err
	}
	for i := range 4 {
		if err := list(admin); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := list(admin)
	var ce *connect.Error
	if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "too many calls with this key: try again in 15s") ||
		!errors.As(err, &ce) || ce.Meta().Get("Retry-After") != "15" {
		t.Fatalf("the 5th call: %v", err)
	}
	if err := list(other); err != nil {
		t.Fatalf("another tenant's key: %v", err)
	}
	for range 5 {
		if _, err := call(deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}); err != nil {
			t.Fatalf("a decider: %v", err)
		}
	}
	now.Add(int64(15 * time.Second))
	if err := list(admin); err != nil {
		t.Fatalf("15 s later: %v", err)
	}
	if err := list(admin); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("the token after it: %v", err)
	}
}
