package decision

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/internal/authguard"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// KeyGuard slows down guessing check keys on every decider API: each
// address (an IPv6 caller's /64) may send perMinute invalid keys a minute,
// as many at once; past it, its calls are refused, resource_exhausted
// (HTTP 429), valid keys too, until it is back under. Invalid keys and
// refusals are counted in metrics, and logged at most once a second with
// the address and how many were not logged. A nil *KeyGuard limits
// nothing. Behind a load balancer every caller shares its address.
// Until an invalid key comes, and a minute after the last, a check costs
// the guard one atomic load: no address is looked up.
type KeyGuard struct {
	guard            *authguard.Guard
	logger           *slog.Logger
	invalid, refused prometheus.Counter
	lastLog          atomic.Int64 // unix ns
	unlogged         atomic.Int64
	// lastFailure is when an invalid key last came (unix ns; 0: never).
	// An address is refused only within a minute of its last invalid key
	// (its bucket is full again after one), so until one comes, and a
	// minute after, a check costs the guard one atomic load.
	lastFailure atomic.Int64
}

// NewKeyGuard returns a guard of perMinute invalid keys a minute per
// address, its metrics registered on reg; nil when perMinute is 0 or less.
func NewKeyGuard(perMinute int, logger *slog.Logger, reg prometheus.Registerer) *KeyGuard {
	if perMinute <= 0 {
		return nil
	}
	g := &KeyGuard{guard: authguard.New(perMinute, nil, "invalid keys from this address"), logger: logger,
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_check_key_failures_total",
			Help: "Checks refused for an invalid, revoked or expired check key."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_check_key_throttled_total",
			Help: "Calls refused because their address sent too many invalid check keys (-auth-failures)."}),
	}
	reg.MustRegister(g.invalid, g.refused)
	return g
}

// Authorize authenticates a call's check key (cfg.Authenticate), from
// the peer address peer, through the key guard.
func (cfg *Service) Authorize(authorization, peer string) (*decide.Compiled, error) {
	g := cfg.KeyGuard
	if g == nil {
		return cfg.Authenticate(authorization)
	}
	var name string
	if last := g.lastFailure.Load(); last != 0 && time.Now().UnixNano()-last < int64(time.Minute) {
		name = addressName(peer)
		if err := g.guard.Check(name); err != nil {
			g.refused.Inc()
			var r *authguard.RefusedError
			errors.As(err, &r)
			return nil, policy.Errorf(policy.CodeResourceExhausted, "%s", r.Error())
		}
	}
	c, err := cfg.Authenticate(authorization)
	if err != nil && policy.ErrorCode(err) == policy.CodeUnauthenticated {
		if name == "" {
			name = addressName(peer)
		}
		g.lastFailure.Store(time.Now().UnixNano())
		g.guard.Failed(name)
		g.invalid.Inc()
		g.log(name)
	}
	return c, err
}

// log logs an invalid key from name, at most once a second.
func (g *KeyGuard) log(name string) {
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(time.Second) || !g.lastLog.CompareAndSwap(last, now) {
		g.unlogged.Add(1)
		return
	}
	g.logger.LogAttrs(context.Background(), slog.LevelWarn, "invalid check key", slog.String("address", name),
		slog.Int64("others_since_last_line", g.unlogged.Swap(0)))
}

// addressName names the caller at peer ("ip:port") as the guard counts
// it: its IP, an IPv6 one by its /64; peer itself when it is no IP.
func addressName(peer string) string {
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return peer
	}
	return clientip.Name(ap.Addr(), clientip.IPv6Network)
}

// peerKey is the context key of a call's peer address, for APIs whose
// context does not carry it (Connect's handlers).
type peerKey struct{}

// WithPeer returns ctx carrying the peer address addr.
func WithPeer(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, peerKey{}, addr)
}

// PeerOf is the peer address of a call: WithPeer's, else grpc-go's.
func PeerOf(ctx context.Context) string {
	if a, ok := ctx.Value(peerKey{}).(string); ok {
		return a
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
