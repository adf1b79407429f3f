package decider

import (
	"strings"
	"testing"
	"time"
)

// The defaults are valid, and each wrong setting is refused before
// anything starts, naming its flag.
func TestValidateNamesTheSetting(t *testing.T) {
	if err := (&Config{}).Validate(); err == nil {
		t.Error("the zero Config validated: it has no budget")
	}
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	proxy := func(c *Config) { c.Proxy.Upstream, c.Proxy.Key = "http://app:8000", "sk_check_x" }
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"budget", func(c *Config) { c.Budget = 0 }, "-budget"},
		{"redis timeout", func(c *Config) { c.RedisTimeout = -time.Second }, "-redis-timeout"},
		{"in flight", func(c *Config) { c.MaxInFlight = -1 }, "-max-in-flight"},
		{"share", func(c *Config) { c.LocalShare = 1.5 }, "-local-share"},
		{"policy", func(c *Config) { c.OverloadPolicy = "shrug" }, "-overload-policy"},
		{"headers", func(c *Config) { c.RateLimitHeaders = "y" }, "y"},
		{"both proxy modes", func(c *Config) { proxy(c); c.Proxy.ForwardAuth = true }, "-forward-auth"},
		{"deny status", func(c *Config) { proxy(c); c.Proxy.DenyStatus = 500 }, "-forward-auth-deny-status"},
		{"ipv6 prefix", func(c *Config) { proxy(c); c.Proxy.IPv6Prefix = 0 }, "-ipv6-prefix"},
		{"jwt half", func(c *Config) { proxy(c); c.Proxy.JWTClaim = "sub" }, "-identity-jwks-url"},
		{"no key", func(c *Config) { proxy(c); c.Proxy.Key = "" }, "SLUICE_PROXY_KEY"},
		{"bad upstream", func(c *Config) { proxy(c); c.Proxy.Upstream = "ftp://x" }, "upstream"},
		{"tier header alone", func(c *Config) { proxy(c); c.Proxy.TierHeader = "X-Tier" }, "-trusted-proxies"},
	} {
		c := Defaults()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
