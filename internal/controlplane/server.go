package controlplane

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/tenantfile"
	"github.com/sluicehq/sluice/web"
)

// MaxRequestBytes bounds a request message.
const MaxRequestBytes = 1 << 20

// HandlerConfig configures the API handler (NewHandler).
type HandlerConfig struct {
	// Store keeps the configuration; Watches streams its changes to the
	// deciders; Files applies tenant files in its transactions; Reports
	// reads the analytics rollups. All are required (Settings.Serve
	// builds them on one PostgreSQL).
	Store   Store
	Watches Watcher
	Files   TenantFiles
	Reports Reports
	// OperatorKey is the operator's secret (SLUICE_OPERATOR_KEY); empty
	// disables the operator role. Several, comma-separated, are each
	// accepted: to rotate it, add the new one, move every client over,
	// then drop the old.
	OperatorKey string
	// DeciderKey is the deciders' credential for the config service
	// (SLUICE_DECIDER_KEY); empty disables the config service. Several,
	// comma-separated, are each accepted, as OperatorKey's.
	DeciderKey string
	// OperatorKeyFunc and DeciderKeyFunc, when set, are asked for the
	// keys (as OperatorKey and DeciderKey hold them) at each call instead:
	// a key file reread when it changes (secretfile.File.Get), so that
	// rotating needs no restart. They must be cheap.
	OperatorKeyFunc, DeciderKeyFunc func() string
	// Closing, when closed, ends every config watch, so that a graceful
	// shutdown need not wait for the deciders' streams (they reconnect,
	// to another replica). Close it from http.Server.RegisterOnShutdown.
	Closing <-chan struct{}
	// Registerer receives the API's metrics (calls by procedure and
	// answer, their latency, open config watches); nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// AuthFailures is how many invalid keys an address may send a minute
	// (as many at once) before its calls are refused, resource_exhausted,
	// until it is back under, without a database lookup; 0 leaves them
	// unlimited. The binaries set 30 (SLUICE_AUTH_FAILURES). A refused
	// address's valid keys wait too: the address is all there is.
	AuthFailures int
	// KeyCalls is how many calls each key (the operator's, each tenant's
	// admin and viewer keys) may make a minute, as many at once, before
	// its calls are refused with resource_exhausted until it is back
	// under; deciders are not counted. 0 leaves them unlimited. The
	// binaries set 6000 (SLUICE_KEY_CALLS).
	KeyCalls int
	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// the guard names a caller's address (see clientip.Of); with none,
	// every caller behind one proxy shares the proxy's budget.
	TrustedProxies []netip.Prefix
	// Now is the guards' clock; nil is time.Now.
	Now func() time.Time
	// Tracer, when set, puts a span around each unary call (tracing.Setup);
	// nil traces nothing.
	Tracer trace.Tracer
	// ReadTimeout bounds how long a client may take to send a whole
	// request, headers and body (a streaming call's once its request is
	// read is not bounded); 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Console tunes the console served under /console/.
	Console web.Options
}

func init() {
	for _, p := range []string{
		sluicev1connect.TenantServiceCreateTenantProcedure, sluicev1connect.TenantServiceListTenantsProcedure, sluicev1connect.TenantServiceUpdateTenantProcedure,
		sluicev1connect.TenantServiceDeleteTenantProcedure, sluicev1connect.DeciderServiceListDecidersProcedure,
	} {
		operatorOnly[p] = true
	}
	deciderOnly[sluicev1connect.ConfigServiceGetSnapshotsProcedure] = true
	deciderOnly[sluicev1connect.ConfigServiceWatchProcedure] = true
	for _, p := range []string{
		sluicev1connect.TenantServiceGetTenantProcedure,
		sluicev1connect.TierServiceListTiersProcedure, sluicev1connect.RuleServiceListRulesProcedure,
		sluicev1connect.OverrideServiceListOverridesProcedure, sluicev1connect.AuditServiceListAuditProcedure,
		sluicev1connect.TenantFileServiceExportTenantFileProcedure,
		sluicev1connect.ReportServiceGetTimeseriesProcedure, sluicev1connect.ReportServiceGetTopClientsProcedure,
		sluicev1connect.ReportServiceGetBreakdownProcedure, sluicev1connect.ReportServiceExportCSVProcedure,
	} {
		viewable[p] = true
	}
}

// NewHandler returns the handler of every control-plane service, serving
// Connect, gRPC and gRPC-Web.
func NewHandler(cfg HandlerConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	auth := &authenticator{keys: cfg.Store, logger: cfg.Logger, guard: newAuthGuard(cfg.AuthFailures, cfg.Now), trusted: cfg.TrustedProxies,
		operator: newKeySet(cfg.OperatorKey, cfg.OperatorKeyFunc), decider: newKeySet(cfg.DeciderKey, cfg.DeciderKeyFunc),
		calls: newCallGuard(cfg.KeyCalls, cfg.Now)}
	s := &server{store: cfg.Store, files: cfg.Files, reports: cfg.Reports, logger: cfg.Logger, closing: cfg.Closing,
		watches: cfg.Watches, metrics: newMetrics(cfg.Registerer), snapshots: newSnapshotCache(snapshotCacheBytes),
		fleet: &fleet{count: cfg.Store.LiveDeciders}}
	// The metrics outside the authentication: refusals are counted too.
	chain := []connect.Interceptor{s.metrics, interceptor{auth}, refuseBadFields()}
	if cfg.Tracer != nil {
		chain = append([]connect.Interceptor{tracer{cfg.Tracer}}, chain...)
	}
	calls := connect.WithInterceptors(chain...)
	opts := []connect.HandlerOption{calls, protoconv.FieldJSON(), connect.WithReadMaxBytes(MaxRequestBytes)}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewTenantServiceHandler(tenantServer{s}, opts...))
	mux.Handle(sluicev1connect.NewTierServiceHandler(tierServer{s}, opts...))
	mux.Handle(sluicev1connect.NewRuleServiceHandler(ruleServer{s}, opts...))
	mux.Handle(sluicev1connect.NewKeyServiceHandler(keyServer{s}, opts...))
	mux.Handle(sluicev1connect.NewOverrideServiceHandler(overrideServer{s}, opts...))
	mux.Handle(sluicev1connect.NewAuditServiceHandler(auditServer{s}, opts...))
	mux.Handle(sluicev1connect.NewConfigServiceHandler(configServer{s}, opts...))
	mux.Handle(sluicev1connect.NewReportServiceHandler(reportServer{s}, opts...))
	mux.Handle(sluicev1connect.NewDeciderServiceHandler(deciderServer{s}, opts...))
	// A tenant file may be larger than other requests (many overrides),
	// and several files larger again.
	mux.Handle(sluicev1connect.NewTenantFileServiceHandler(tenantFileServer{s},
		calls, protoconv.FieldJSON(), connect.WithReadMaxBytes(tenantfile.MaxBytes+64<<10)))
	_, files := sluicev1connect.NewTenantFileServiceHandler(tenantFileServer{s}, calls, protoconv.FieldJSON(), connect.WithReadMaxBytes(MaxFilesBytes+64<<10))
	mux.Handle(sluicev1connect.TenantFileServiceApplyTenantFilesProcedure, files)
	// Unkey's override calls, for applications managing overrides with its SDK.
	mux.Handle("POST /v2/{call}", s.unkeyHandler(auth))
	// The console: static files calling the API above with the signed-in key.
	mux.Handle("GET "+web.Prefix, web.Handler(cfg.Console))
	mux.Handle("GET /{$}", http.RedirectHandler(web.Prefix, http.StatusFound))
	return guardReads(mux, auth, cmp.Or(cfg.ReadTimeout, DefaultReadTimeout))
}

type server struct {
	store   Store
	files   TenantFiles
	reports Reports
	logger  *slog.Logger
	closing <-chan struct{}
	// watches serves every decider's config watch.
	watches Watcher
	metrics *metrics
	// snapshots keeps the tenants' snapshots deciders pull.
	snapshots *snapshotCache
	// fleet counts the live deciders.
	fleet *fleet
}

// reply answers msg, or err as a Connect error.
func reply[T any](ctx context.Context, s *server, msg *T, err error) (*connect.Response[T], error) {
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce
		}
		return nil, protoconv.ToConnectError(ctx, s.logger, err)
	}
	return connect.NewResponse(msg), nil
}

// tenantOut, tierOut and ruleOut are the admin API's tenants, tiers and
// rules: protoconv's, with the etags that conditioned updates carry back
// (the config snapshots for deciders have no use for them).
func tenantOut(t policy.Tenant, version int64) *sluicev1.Tenant {
	p := protoconv.TenantToProto(t, version)
	p.Etag = t.ETag()
	return p
}

func tierOut(t policy.Tier) *sluicev1.Tier {
	p := protoconv.TierToProto(t)
	for i := range t.Rules {
		p.Rules[i].Etag = t.Rules[i].ETag()
	}
	return p
}

func ruleOut(r policy.Rule) *sluicev1.Rule {
	p := protoconv.RuleToProto(r)
	p.Etag = r.ETag()
	return p
}

type tenantServer struct{ *server }

func (s tenantServer) CreateTenant(ctx context.Context, req *connect.Request[sluicev1.CreateTenantRequest]) (*connect.Response[sluicev1.CreateTenantResponse], error) {
	t, err := s.store.CreateTenant(ctx, principalFrom(ctx).actor(), protoconv.TenantFromProto(req.Msg.GetTenant()))
	return reply(ctx, s.server, &sluicev1.CreateTenantResponse{Tenant: tenantOut(t, 1)}, err)
}

func (s tenantServer) GetTenant(ctx context.Context, req *connect.Request[sluicev1.GetTenantRequest]) (*connect.Response[sluicev1.GetTenantResponse], error) {
	// A tenant's keys read their own tenant (its id may be left out); the
	// operator names one.
	id, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	t, v, err := s.store.GetTenant(ctx, id)
	return reply(ctx, s.server, &sluicev1.GetTenantResponse{Tenant: tenantOut(t, v)}, err)
}

// ListTenants answers the tenants in pages by slug; a page token is the
// slug its page ended at.
func (s tenantServer) ListTenants(ctx context.Context, req *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error) {
	after, err := readToken(req.Msg.GetPageToken(), 1)
	if err != nil {
		return reply[sluicev1.ListTenantsResponse](ctx, s.server, nil, err)
	}
	var afterSlug string
	if after != nil {
		afterSlug = after[0]
	}
	ts, next, err := s.store.PageTenants(ctx, req.Msg.GetSlugPrefix(), afterSlug, int(req.Msg.GetPageSize()))
	out := &sluicev1.ListTenantsResponse{}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, tenantOut(t.Tenant, t.Version))
	}
	if next != "" {
		out.NextPageToken = pageToken(next)
	}
	return reply(ctx, s.server, out, err)
}

func (s tenantServer) UpdateTenant(ctx context.Context, req *connect.Request[sluicev1.UpdateTenantRequest]) (*connect.Response[sluicev1.UpdateTenantResponse], error) {
	if err := required(ctx, "tenant.id", req.Msg.GetTenant().GetId()); err != nil {
		return nil, err
	}
	v, err := s.store.UpdateTenant(ctx, principalFrom(ctx).actor(), protoconv.TenantFromProto(req.Msg.GetTenant()), req.Msg.GetTenant().GetEtag())
	return reply(ctx, s.server, &sluicev1.UpdateTenantResponse{ConfigVersion: v}, err)
}

func (s tenantServer) DeleteTenant(ctx context.Context, req *connect.Request[sluicev1.DeleteTenantRequest]) (*connect.Response[sluicev1.DeleteTenantResponse], error) {
	if err := required(ctx, "tenant_id", req.Msg.GetTenantId()); err != nil {
		return nil, err
	}
	err := s.store.DeleteTenant(ctx, principalFrom(ctx).actor(), req.Msg.GetTenantId())
	return reply(ctx, s.server, &sluicev1.DeleteTenantResponse{}, err)
}

type tierServer struct{ *server }

func (s tierServer) CreateTier(ctx context.Context, req *connect.Request[sluicev1.CreateTierRequest]) (*connect.Response[sluicev1.CreateTierResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	t, v, err := s.store.CreateTier(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetName())
	return reply(ctx, s.server, &sluicev1.CreateTierResponse{Tier: tierOut(t), ConfigVersion: v}, err)
}

func (s tierServer) ListTiers(ctx context.Context, req *connect.Request[sluicev1.ListTiersRequest]) (*connect.Response[sluicev1.ListTiersResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	tiers, err := s.store.ListTiers(ctx, tenant)
	out := &sluicev1.ListTiersResponse{}
	for _, t := range tiers {
		out.Tiers = append(out.Tiers, tierOut(t))
	}
	return reply(ctx, s.server, out, err)
}

func (s tierServer) DeleteTier(ctx context.Context, req *connect.Request[sluicev1.DeleteTierRequest]) (*connect.Response[sluicev1.DeleteTierResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "tier_id", req.Msg.GetTierId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.DeleteTier(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetTierId())
	return reply(ctx, s.server, &sluicev1.DeleteTierResponse{ConfigVersion: v}, err)
}

func (s tierServer) RenameTier(ctx context.Context, req *connect.Request[sluicev1.RenameTierRequest]) (*connect.Response[sluicev1.RenameTierResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "tier_id", req.Msg.GetTierId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.RenameTier(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetTierId(), req.Msg.GetName())
	return reply(ctx, s.server, &sluicev1.RenameTierResponse{ConfigVersion: v}, err)
}

type ruleServer struct{ *server }

func (s ruleServer) CreateRule(ctx context.Context, req *connect.Request[sluicev1.CreateRuleRequest]) (*connect.Response[sluicev1.CreateRuleResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	r, v, err := s.store.CreateRule(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetTierId(), protoconv.RuleFromProto(req.Msg.GetRule()))
	return reply(ctx, s.server, &sluicev1.CreateRuleResponse{Rule: ruleOut(r), ConfigVersion: v}, err)
}

func (s ruleServer) ListRules(ctx context.Context, req *connect.Request[sluicev1.ListRulesRequest]) (*connect.Response[sluicev1.ListRulesResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "tier_id", req.Msg.GetTierId())
	if err != nil {
		return nil, err
	}
	rules, err := s.store.ListRules(ctx, tenant, req.Msg.GetTierId())
	out := &sluicev1.ListRulesResponse{}
	for _, r := range rules {
		out.Rules = append(out.Rules, ruleOut(r))
	}
	return reply(ctx, s.server, out, err)
}

func (s ruleServer) UpdateRule(ctx context.Context, req *connect.Request[sluicev1.UpdateRuleRequest]) (*connect.Response[sluicev1.UpdateRuleResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "rule.id", req.Msg.GetRule().GetId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.UpdateRule(ctx, principalFrom(ctx).actor(), tenant, protoconv.RuleFromProto(req.Msg.GetRule()), req.Msg.GetRule().GetEtag())
	return reply(ctx, s.server, &sluicev1.UpdateRuleResponse{ConfigVersion: v}, err)
}

func (s ruleServer) DeleteRule(ctx context.Context, req *connect.Request[sluicev1.DeleteRuleRequest]) (*connect.Response[sluicev1.DeleteRuleResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "rule_id", req.Msg.GetRuleId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.DeleteRule(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetRuleId())
	return reply(ctx, s.server, &sluicev1.DeleteRuleResponse{ConfigVersion: v}, err)
}

func (s ruleServer) ReorderRules(ctx context.Context, req *connect.Request[sluicev1.ReorderRulesRequest]) (*connect.Response[sluicev1.ReorderRulesResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "tier_id", req.Msg.GetTierId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.ReorderRules(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetTierId(), req.Msg.GetRuleIds())
	return reply(ctx, s.server, &sluicev1.ReorderRulesResponse{ConfigVersion: v}, err)
}

type keyServer struct{ *server }

func (s keyServer) CreateKey(ctx context.Context, req *connect.Request[sluicev1.CreateKeyRequest]) (*connect.Response[sluicev1.CreateKeyResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	var expires time.Time
	if e := req.Msg.GetExpiresAt(); e != nil {
		if e.CheckValid() != nil {
			return reply[sluicev1.CreateKeyResponse](ctx, s.server, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid key",
				Fields: []policy.FieldError{{Field: "expires_at", Description: "not a valid time"}}})
		}
		expires = e.AsTime()
	}
	secret, k, err := s.store.CreateExpiringKey(ctx, principalFrom(ctx).actor(), tenant, protoconv.KeyKindFromProto(req.Msg.GetKind()), req.Msg.GetName(), expires)
	return reply(ctx, s.server, &sluicev1.CreateKeyResponse{Key: protoconv.KeyToProto(k), Secret: secret}, err)
}

func (s keyServer) ListKeys(ctx context.Context, req *connect.Request[sluicev1.ListKeysRequest]) (*connect.Response[sluicev1.ListKeysResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	after, err := keyCursor(req.Msg.GetPageToken())
	if err != nil {
		return reply[sluicev1.ListKeysResponse](ctx, s.server, nil, err)
	}
	keys, next, err := s.store.PageKeys(ctx, tenant, req.Msg.GetShowRevoked(), after, int(req.Msg.GetPageSize()))
	out := &sluicev1.ListKeysResponse{}
	for _, k := range keys {
		out.Keys = append(out.Keys, protoconv.KeyToProto(k))
	}
	if next != nil {
		out.NextPageToken = pageToken(next.CreatedAt.Format(time.RFC3339Nano), next.ID)
	}
	return reply(ctx, s.server, out, err)
}

func (s keyServer) RevokeKey(ctx context.Context, req *connect.Request[sluicev1.RevokeKeyRequest]) (*connect.Response[sluicev1.RevokeKeyResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "key_id", req.Msg.GetKeyId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.RevokeKey(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetKeyId())
	return reply(ctx, s.server, &sluicev1.RevokeKeyResponse{ConfigVersion: v}, err)
}

func (s keyServer) RotateKey(ctx context.Context, req *connect.Request[sluicev1.RotateKeyRequest]) (*connect.Response[sluicev1.RotateKeyResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "key_id", req.Msg.GetKeyId())
	if err != nil {
		return nil, err
	}
	grace := req.Msg.GetGrace()
	if grace != nil && grace.CheckValid() != nil {
		return reply[sluicev1.RotateKeyResponse](ctx, s.server, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid rotation",
			Fields: []policy.FieldError{{Field: "grace", Description: "not a valid duration"}}})
	}
	secret, k, old, err := s.store.RotateKey(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetKeyId(), grace.AsDuration())
	return reply(ctx, s.server, &sluicev1.RotateKeyResponse{Key: protoconv.KeyToProto(k), Secret: secret, Old: protoconv.KeyToProto(old)}, err)
}
