package controlplane

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// TestInvalidKeysLimited: an address that sends more invalid keys than its
// budget (5 a minute here) is refused, resource_exhausted, saying how long
// to wait, its valid keys too, until a token is back (12 s on the test's
// clock); the operator key still works, and another address is not
// affected.
func TestInvalidKeysLimited(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC).UnixNano())
	srv, _ := newServerWith(t, func(c *Config) {
		c.AuthFailures = 5
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
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
