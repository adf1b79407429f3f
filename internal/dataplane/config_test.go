package dataplane

import (
	"strings"
	"testing"
	"time"
)

// The defaults are valid, and each wrong setting is refused before
// anything starts, naming its flag.
func TestValidateNamesTheSetting(t *testing.T) {
	if err := (&Settings{}).Validate(); err == nil {
		t.Error("the zero Settings validated: it has no budget")
	}
	d := DefaultSettings()
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	proxy := func(c *Settings) { c.Proxy.Upstream, c.Proxy.Key = "http://app:8000", "sk_check_x" }
	for _, tc := range []struct {
		name string
		edit func(*Settings)
		want string
	}{
		{"budget", func(c *Settings) { c.Budget = 0 }, "-budget"},
		{"redis timeout", func(c *Settings) { c.RedisTimeout = -time.Second }, "-redis-timeout"},
		{"in flight", func(c *Settings) { c.MaxInFlight = -1 }, "-max-in-flight"},
		{"share", func(c *Settings) { c.LocalShare = 1.5 }, "-local-share"},
		{"policy", func(c *Settings) { c.OverloadPolicy = "shrug" }, "-overload-policy"},
		{"headers", func(c *Settings) { c.RateLimitHeaders = "y" }, "y"},
		{"both proxy modes", func(c *Settings) { proxy(c); c.Proxy.ForwardAuth = true }, "-forward-auth"},
		{"deny status", func(c *Settings) { proxy(c); c.Proxy.DenyStatus = 500 }, "-forward-auth-deny-status"},
		{"ipv6 prefix", func(c *Settings) { proxy(c); c.Proxy.IPv6Prefix = 0 }, "-ipv6-prefix"},
		{"jwt half", func(c *Settings) { proxy(c); c.Proxy.JWTClaim = "sub" }, "-identity-jwks-url"},
		{"no key", func(c *Settings) { proxy(c); c.Proxy.Key = "" }, "SLUICE_PROXY_KEY"},
		{"bad upstream", func(c *Settings) { proxy(c); c.Proxy.Upstream = "ftp://x" }, "upstream"},
		{"shed status 500", func(c *Settings) { proxy(c); c.Proxy.ShedStatus = 500 }, "-shed-status"},
		{"tier header alone", func(c *Settings) { proxy(c); c.Proxy.TierHeader = "X-Tier" }, "-trusted-proxies"},
	} {
		c := DefaultSettings()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
