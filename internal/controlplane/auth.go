// Package controlplane serves the control plane's Connect API (Connect,
// gRPC and gRPC-Web on one handler): tenants, tiers, rules and keys, with
// authentication and tenant scoping in one interceptor.
package controlplane

import (
	"cmp"
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/authguard"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// Role is what an authenticated caller may do.
type Role uint8

// Roles.
const (
	RoleOperator Role = iota + 1 // every tenant, and tenants themselves
	RoleAdmin                    // one tenant's configuration
	RoleDecider                  // the config service only; with a TenantID (a check key), for that tenant
	RoleViewer                   // one tenant's configuration and reports, read only
)

// Principal is the authenticated caller of a request.
type Principal struct {
	Role     Role
	TenantID string // RoleAdmin, RoleViewer, a check key's RoleDecider: the only tenant it may touch
	KeyID    string
}

// actor names the principal in the audit log; never a secret.
func (p Principal) actor() policy.Actor {
	if p.Role == RoleOperator {
		return "operator"
	}
	return policy.Actor("key:" + p.KeyID)
}

type principalKey struct{}

func principalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// operatorOnly and deciderOnly list the procedures only the operator, and
// only deciders, may call; viewable those a viewer key may call, which
// change nothing (a procedure not listed is refused to viewers: a new one
// is a change until it is listed here).
var operatorOnly, deciderOnly, viewable = map[string]bool{}, map[string]bool{}, map[string]bool{}

// authenticator resolves bearer keys: the operator key and the decider
// credential (compared by hash, in constant time), or a tenant's admin key
// from the store.
type authenticator struct {
	operator, decider *keySet          // the accepted secrets
	calls             *authguard.Guard // calls per key (not deciders')
	keys              Keys
	guard             *authguard.Guard // invalid keys per address
	trusted           []netip.Prefix
	logger            *slog.Logger
}

// principal authenticates the key in the Authorization header of header, a
// request from the peer address peer.
func (a *authenticator) principal(ctx context.Context, header http.Header, peer string) (Principal, error) {
	scheme, secret, ok := strings.Cut(header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Principal{}, protoconv.Error(policy.CodeUnauthenticated, "missing key: send Authorization: Bearer <key>")
	}
	h := policy.HashKey(strings.TrimSpace(secret))
	if oneOf(h, a.operator.hashes()) {
		return Principal{Role: RoleOperator}, nil
	}
	if oneOf(h, a.decider.hashes()) {
		return Principal{Role: RoleDecider}, nil
	}
	client := peer // not an IP address (a Unix socket's): as it is
	if ip := clientip.Of(peer, header, a.trusted); ip.IsValid() {
		client = clientip.Name(ip, clientip.IPv6Network) // an IPv6 caller by its /64, whatever address it picks there
	}
	if err := a.guard.Check(client); err != nil {
		return Principal{}, guardError(err)
	}
	k, err := a.keys.KeyByHash(ctx, h)
	if err != nil {
		if policy.ErrorCode(err) == policy.CodeUnauthenticated {
			a.guard.Failed(client)
			return Principal{}, protoconv.Error(policy.CodeUnauthenticated, "invalid or revoked key")
		}
		return Principal{}, protoconv.ToConnectError(ctx, a.logger, err)
	}
	switch k.Kind {
	case policy.KeyAdmin:
		return Principal{Role: RoleAdmin, TenantID: k.TenantID, KeyID: k.ID}, nil
	case policy.KeyViewer:
		return Principal{Role: RoleViewer, TenantID: k.TenantID, KeyID: k.ID}, nil
	}
	// A check key is the data plane's: a decider serving one tenant (a
	// reverse-proxy sidecar, say) pulls that tenant's configuration with
	// it, and holds no credential to the others'.
	return Principal{Role: RoleDecider, TenantID: k.TenantID, KeyID: k.ID}, nil
}

// hashesOf hashes each of the comma-separated secrets of keys.
// keySet is a comma-separated list of secrets, fixed or asked of a
// function at each use, kept hashed.
type keySet struct {
	get func() string // nil: fixed
	cur atomic.Pointer[hashedKeys]
}

type hashedKeys struct {
	keys   string
	hashes [][32]byte
}

func newKeySet(keys string, get func() string) *keySet {
	k := &keySet{get: get}
	if get != nil {
		keys = get()
	}
	k.cur.Store(&hashedKeys{keys, hashesOf(keys)})
	return k
}

// hashes returns the hashes of the secrets, hashing them again only when
// they changed.
func (k *keySet) hashes() [][32]byte {
	c := k.cur.Load()
	if k.get == nil {
		return c.hashes
	}
	if keys := k.get(); keys != c.keys {
		c = &hashedKeys{keys, hashesOf(keys)}
		k.cur.Store(c)
	}
	return c.hashes
}

func hashesOf(keys string) [][32]byte {
	var out [][32]byte
	for k := range strings.SplitSeq(keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, policy.HashKey(k))
		}
	}
	return out
}

// oneOf reports whether h is one of hashes, comparing with each in
// constant time.
func oneOf(h [32]byte, hashes [][32]byte) bool {
	match := 0
	for _, x := range hashes {
		match |= subtle.ConstantTimeCompare(h[:], x[:])
	}
	return match == 1
}

// authorize authenticates a call to procedure and returns the context
// carrying its principal. Deciders reach only the config service (check
// keys as deciders of their tenant), the config service only deciders,
// tenants only the operator, and viewer keys only what changes nothing.
func (a *authenticator) authorize(ctx context.Context, procedure string, h http.Header, peer string) (context.Context, error) {
	p, err := a.principal(ctx, h, peer)
	if err != nil {
		return nil, err
	}
	switch {
	case p.Role == RoleDecider && p.TenantID != "" && !deciderOnly[procedure]:
		return nil, protoconv.Error(policy.CodePermissionDenied, "check keys are for the data plane only: the check APIs, and the config service for their tenant")
	case deciderOnly[procedure] != (p.Role == RoleDecider):
		return nil, protoconv.Error(policy.CodePermissionDenied, "the config service is for deciders, and deciders have only it")
	case operatorOnly[procedure] && p.Role != RoleOperator:
		return nil, protoconv.Error(policy.CodePermissionDenied, "only the operator manages tenants")
	case p.Role == RoleViewer && !viewable[procedure]:
		return nil, protoconv.Error(policy.CodePermissionDenied, "a viewer key reads the tenant's configuration and reports; it changes nothing, and does not see keys")
	}
	if p.Role != RoleDecider || p.KeyID != "" { // the decider credential is not counted; check keys are
		if err := a.calls.Take(cmp.Or(p.KeyID, "operator")); err != nil {
			return nil, guardError(err)
		}
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// interceptor applies authorize to unary calls and to streams.
type interceptor struct{ a *authenticator }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := i.a.authorize(ctx, req.Spec().Procedure, req.Header(), req.Peer().Addr)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.a.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader(), conn.Peer().Addr)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// tenantOf returns the tenant a call acts in: the requested one, which an
// admin key may leave empty and may not set to another tenant's.
// tenantWith is tenantOf, then required over the request's ids.
func tenantWith(ctx context.Context, requested string, fieldValue ...string) (string, error) {
	tenant, err := tenantOf(ctx, requested)
	if err != nil {
		return "", err
	}
	return tenant, required(ctx, fieldValue...)
}

// required refuses a request that leaves an id it needs empty (fieldValue
// holds pairs: a field's name, its value) with InvalidArgument naming each
// such field. An id given but unknown, or not an id at all, is NotFound,
// as the store answers.
func required(ctx context.Context, fieldValue ...string) error {
	var fields []policy.FieldError
	for i := 0; i+1 < len(fieldValue); i += 2 {
		if fieldValue[i+1] == "" {
			fields = append(fields, policy.FieldError{Field: fieldValue[i], Description: "required"})
		}
	}
	if fields == nil {
		return nil
	}
	return protoconv.ToConnectError(ctx, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid request", Fields: fields})
}

func tenantOf(ctx context.Context, requested string) (string, error) {
	p := principalFrom(ctx)
	switch {
	case (p.Role == RoleAdmin || p.Role == RoleViewer) && (requested == "" || requested == p.TenantID):
		return p.TenantID, nil
	case p.Role == RoleAdmin || p.Role == RoleViewer:
		return "", protoconv.Error(policy.CodePermissionDenied, "this key belongs to another tenant")
	case p.Role == RoleOperator && requested != "":
		return requested, nil
	case p.Role == RoleOperator:
		return "", protoconv.ToConnectError(ctx, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid request",
			Fields: []policy.FieldError{{Field: "tenant_id", Description: "required with the operator key"}}})
	}
	return "", protoconv.Error(policy.CodeUnauthenticated, "unauthenticated")
}
