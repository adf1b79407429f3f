// Package dataplane assembles a decider, the binary cmd/dataplane runs:
// main fills Settings from its flags and environment, Validate checks
// them, and Serve serves them until its context ends. Construction runs in dependency
// order: engines, the decider, metrics, the config follower, the
// listeners.
package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// Settings are a decider's settings, one field per setting. DefaultSettings gives
// each its default; docs/configuration.md and Flags say what each does.
type Settings struct {
	Addr      string // the check APIs, /healthz and /readyz
	AdminAddr string // /metrics and detailed health; "off" none
	TLS       TLSFiles

	ControlPlane   string        // the control plane's URL
	DeciderKey     string        // the decider credential, or a tenant's check key
	DeciderKeyFunc func() string // reads it again (a rotated file); nil: DeciderKey
	StateFile      string        // the last-known-good configuration
	Name           string        // this decider in events and the control plane's list; default host/pid
	ConfigRepull   time.Duration // how often the configuration is pulled again besides the watch; 0: 30s

	// HTTPFast serves the check routes' HTTP/1.1 on fasthttp, beside
	// net/http on the same port (httpport.NewServer): tuning, measured at
	// about half net/http's CPU per request. False: net/http alone.
	HTTPFast bool

	RedisURL      string // empty: decide in this process only
	RedisCluster  bool
	RedisSentinel bool
	RedisSpin     time.Duration
	RedisPrefix   string
	RedisBatch    bool
	RedisTimeout  time.Duration

	KafkaBrokers  string // comma-separated; empty sends no events
	Kafka         *kafkasec.Config
	EventsTopic   string
	EventsSpool   string // default events-spool beside StateFile; "off" none
	EventsSpoolMB int
	// EventsDeltaInterval is how often counter deltas are sent; 0: 10s.
	EventsDeltaInterval time.Duration

	// Region is this decider's region; GlobalKafka is each region's Kafka
	// for global rules ("region=host:port,...;region=..."), empty: global
	// rules hold in this region alone.
	Region         string
	GlobalKafka    string
	GlobalInterval time.Duration
	GlobalSilence  time.Duration
	GlobalAssume   string // rate, or a share of the limit

	Budget           time.Duration
	MaxInFlight      int
	OverloadPolicy   string  // local, failure_mode or reject
	LocalShare       float64 // 0: 1/the live deciders, as the control plane counts them
	SyncMaxKeys      int
	AuthFailures     int
	RuleMetrics      bool
	ShadowMode       bool
	QuotaMode        bool   // Envoy's rate limit service: every descriptor a quota
	RateLimitHeaders string // ietf, draft-6, x, none or kong
	CORSOrigins      string // comma-separated

	GRPCAddr                  string // "off" none
	GRPCTLS                   TLSFiles
	GRPCMaxConnectionAge      time.Duration
	GRPCMaxConnectionAgeGrace time.Duration

	Proxy Proxy

	// Registry takes the decider's metrics; nil: a registry of its own.
	Registry *prometheus.Registry
	// Tracer traces decisions; nil: tracing.Setup from Getenv's
	// OpenTelemetry variables.
	Tracer trace.Tracer

	Logger *slog.Logger            // nil: JSON to Stderr
	Stdout io.Writer               // where the listening addresses are printed; nil: none
	Getenv func(key string) string // the OpenTelemetry variables (tracing.Setup); nil: none
}

// TLSFiles name a listener's PEM certificate, key and client CA; none
// named serves plaintext, a CA asks clients for certificates.
type TLSFiles struct{ Cert, Key, ClientCA string }

// Proxy is the reverse proxy's settings: on with Upstream or
// ForwardAuth.
type Proxy struct {
	Upstream          string
	ForwardAuth       bool
	DenyStatus        int
	ShedStatus        int
	Addr              string
	TLS               TLSFiles
	Key               string // the check key of the tenant it enforces
	ClientCert        bool   // name clients by their verified certificates
	IdentityHeader    string
	IdentityCookie    string
	JWTClaim          string
	JWKSURL           string
	JWTIssuer         string
	JWTAudience       string
	TrustedProxies    string // comma-separated CIDRs
	IPv6Prefix        int
	ProxyProtocol     string // comma-separated CIDRs
	TierHeader        string
	DescriptorHeaders string
	MaxDelay          time.Duration
	UpstreamTimeout   time.Duration // 0: no bound
	PreserveHost      bool
	FoldRoutes        bool
}

// On reports whether the proxy runs.
func (p Proxy) On() bool { return p.Upstream != "" || p.ForwardAuth }

// DefaultSettings returns every setting at its default.
func DefaultSettings() Settings {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return Settings{
		Addr: "127.0.0.1:8080", AdminAddr: "127.0.0.1:9080", ControlPlane: "http://127.0.0.1:8081",
		StateFile: filepath.Join(cache, "sluice", "decider-snapshot.pb"),
		HTTPFast:  true, RedisBatch: true, RedisTimeout: redisengine.DefaultTimeout,
		Kafka: &kafkasec.Config{}, EventsTopic: "sluice.decisions", EventsSpoolMB: 256,
		GlobalInterval: regions.DefaultInterval, GlobalSilence: time.Second, GlobalAssume: "rate",
		Budget: 50 * time.Millisecond, MaxInFlight: decide.DefaultMaxInFlight, OverloadPolicy: "local",
		SyncMaxKeys: redisengine.DefaultMaxLocalKeys, AuthFailures: 30, RuleMetrics: true, RateLimitHeaders: "ietf",
		GRPCAddr: "127.0.0.1:8089", GRPCMaxConnectionAgeGrace: 30 * time.Second,
		Proxy: Proxy{DenyStatus: http.StatusTooManyRequests, ShedStatus: http.StatusTooManyRequests, Addr: "127.0.0.1:8000", IPv6Prefix: clientip.IPv6Network,
			MaxDelay: 5 * time.Second, UpstreamTimeout: proxy.DefaultUpstreamTimeout},
	}
}

// Validate checks every setting that can be checked without the network,
// naming the flag and variable of the first wrong one.
func (c *Settings) Validate() error {
	_, err := c.parsed()
	return err
}

// parsedConfig is what Validate reads out of the settings' text.
type parsedConfig struct {
	headers  rlheaders.Style
	overload decide.OverloadPolicy
	proxy    proxy.Config // without API, Upstream, Tenant, JWT
	upstream *url.URL
	global   *regions.Config // without Logger; nil: no replication
}

func (c *Settings) parsed() (parsedConfig, error) {
	var p parsedConfig
	var err error
	if p.headers, err = rlheaders.ParseStyle(c.RateLimitHeaders); err != nil {
		return p, err
	}
	if p.overload, err = decide.ParseOverloadPolicy(c.OverloadPolicy); err != nil {
		return p, fmt.Errorf("-overload-policy (SLUICE_OVERLOAD_POLICY): %w", err)
	}
	switch {
	case c.Budget <= 0:
		return p, fmt.Errorf("-budget (SLUICE_DECISION_BUDGET) %v: want more than 0", c.Budget)
	case c.RedisTimeout <= 0:
		return p, fmt.Errorf("-redis-timeout (SLUICE_REDIS_TIMEOUT) %v: want more than 0", c.RedisTimeout)
	case c.MaxInFlight < 0:
		return p, fmt.Errorf("-max-in-flight (SLUICE_MAX_IN_FLIGHT) %d: want 0 (no bound) or more", c.MaxInFlight)
	case c.LocalShare < 0 || c.LocalShare > 1:
		return p, fmt.Errorf("-local-share (SLUICE_LOCAL_SHARE) %v: want 0 (1/live deciders) or more, at most 1", c.LocalShare)
	}
	if p.global, err = c.parsedGlobal(); err != nil {
		return p, err
	}
	if !c.Proxy.On() {
		return p, nil
	}
	x := c.Proxy
	if x.Upstream != "" && x.ForwardAuth {
		return p, errors.New("-forward-auth answers in place of forwarding: give -upstream or -forward-auth, not both")
	}
	p.proxy = proxy.Config{IdentityHeader: x.IdentityHeader, IdentityCookie: x.IdentityCookie, TierHeader: x.TierHeader,
		MaxDelay: x.MaxDelay, ClientCertIdentity: x.ClientCert, IPv6Prefix: x.IPv6Prefix, UpstreamTimeout: x.UpstreamTimeout,
		PreserveHost: x.PreserveHost, ForwardAuth: x.ForwardAuth, DenyStatus: x.DenyStatus, FoldRoutes: x.FoldRoutes,
		ShedStatus: x.ShedStatus}
	if x.DenyStatus != http.StatusTooManyRequests && x.DenyStatus != http.StatusForbidden {
		return p, fmt.Errorf("-forward-auth-deny-status %d: want 429, or 403 for nginx", x.DenyStatus)
	}
	if x.ShedStatus != http.StatusTooManyRequests && x.ShedStatus != http.StatusServiceUnavailable {
		return p, fmt.Errorf("-shed-status %d: want 429 or 503", x.ShedStatus)
	}
	switch {
	case x.UpstreamTimeout < 0:
		return p, fmt.Errorf("-upstream-timeout %v: want 0 (none) or more", x.UpstreamTimeout)
	case x.UpstreamTimeout == 0:
		p.proxy.UpstreamTimeout = -1 // the setting's 0 is "no bound"
	}
	if p.proxy.HeaderDescriptors, err = proxy.ParseHeaderDescriptors(x.DescriptorHeaders); err != nil {
		return p, fmt.Errorf("-descriptor-headers: %w", err)
	}
	if x.IPv6Prefix < 1 || x.IPv6Prefix > 128 {
		return p, fmt.Errorf("-ipv6-prefix %d: want 1 to 128 bits", x.IPv6Prefix)
	}
	if x.ClientCert && x.TLS.ClientCA == "" {
		return p, errors.New("-identity-client-cert needs -proxy-tls-client-ca: only a verified certificate names a client")
	}
	if (x.JWTClaim == "") != (x.JWKSURL == "") {
		return p, errors.New("-identity-jwt-claim and -identity-jwks-url go together")
	}
	if !x.ForwardAuth {
		u, err := url.Parse(x.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return p, fmt.Errorf("upstream %q: want an http:// or https:// URL", x.Upstream)
		}
		p.upstream = u
	}
	if x.Key == "" {
		return p, errors.New("reverse-proxy and forward-auth modes need SLUICE_PROXY_KEY, the check key of the tenant to enforce")
	}
	if p.proxy.TrustedProxies, err = clientip.ParsePrefixes(x.TrustedProxies); err != nil {
		return p, err
	}
	if x.TierHeader != "" && len(p.proxy.TrustedProxies) == 0 {
		return p, errors.New("-tier-header needs -trusted-proxies: the tier is believed only from the gateway that sets it (name it; 0.0.0.0/0,::/0 trusts every peer)")
	}
	if _, err := clientip.ParsePrefixes(x.ProxyProtocol); err != nil {
		return p, fmt.Errorf("proxy-protocol: %w", err)
	}
	return p, nil
}

// parsedGlobal is the replication of global rules' counts the settings
// ask for, or nil.
func (c *Settings) parsedGlobal() (*regions.Config, error) {
	if c.GlobalKafka == "" {
		return nil, nil
	}
	brokers, err := regions.ParseBrokers(c.GlobalKafka)
	if err != nil {
		return nil, fmt.Errorf("-global-kafka (SLUICE_GLOBAL_KAFKA): %w", err)
	}
	assume, share, err := regions.ParseAssumption(c.GlobalAssume)
	switch {
	case err != nil:
		return nil, fmt.Errorf("-global-assume (SLUICE_GLOBAL_ASSUME): %w", err)
	case c.Region == "":
		return nil, errors.New("-global-kafka (SLUICE_GLOBAL_KAFKA) needs -region (SLUICE_REGION): this decider's region")
	case len(brokers[c.Region]) == 0:
		return nil, fmt.Errorf("-global-kafka (SLUICE_GLOBAL_KAFKA) names no brokers for this region, %q", c.Region)
	case c.GlobalInterval < time.Millisecond:
		return nil, fmt.Errorf("-global-interval (SLUICE_GLOBAL_INTERVAL) %v: want 1ms or more", c.GlobalInterval)
	case c.GlobalSilence < c.GlobalInterval:
		return nil, fmt.Errorf("-global-silence (SLUICE_GLOBAL_SILENCE) %v: want at least -global-interval", c.GlobalSilence)
	}
	return &regions.Config{Region: c.Region, Brokers: brokers, Interval: c.GlobalInterval, Silence: c.GlobalSilence,
		Assume: assume, Share: share}, nil
}
