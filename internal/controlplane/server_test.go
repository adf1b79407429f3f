package controlplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/tenantfile"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

const (
	operatorKey = "sk_operator_test_secret"
	deciderKey  = "sk_decider_test_secret"
)

// clients are the generated clients of every service, over one protocol.
type clients struct {
	tenants  sluicev1connect.TenantServiceClient
	tiers    sluicev1connect.TierServiceClient
	rules    sluicev1connect.RuleServiceClient
	keys     sluicev1connect.KeyServiceClient
	ovs      sluicev1connect.OverrideServiceClient
	audit    sluicev1connect.AuditServiceClient
	config   sluicev1connect.ConfigServiceClient
	reports  sluicev1connect.ReportServiceClient
	deciders sluicev1connect.DeciderServiceClient
	files    sluicev1connect.TenantFileServiceClient
}

// newServer serves the API over HTTP/2 (TLS) on a fresh schema and returns
// clients speaking the given protocol option (nil: Connect).
func newServer(t *testing.T) (*httptest.Server, *pgstore.Store) {
	return newServerWith(t, func(*HandlerConfig) {})
}

// newServerWith is newServer with its configuration changed by edit.
func newServerWith(t *testing.T, edit func(*HandlerConfig)) (*httptest.Server, *pgstore.Store) {
	t.Helper()
	store := pgstore.New(pgtest.Pool(t))
	cfg := HandlerConfig{OperatorKey: operatorKey, DeciderKey: deciderKey}.OnPostgres(store, time.Minute)
	edit(&cfg)
	srv := httptest.NewUnstartedServer(NewHandler(cfg))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, store
}

func newClients(srv *httptest.Server, opts ...connect.ClientOption) clients {
	c := srv.Client()
	return clients{
		tenants:  sluicev1connect.NewTenantServiceClient(c, srv.URL, opts...),
		tiers:    sluicev1connect.NewTierServiceClient(c, srv.URL, opts...),
		rules:    sluicev1connect.NewRuleServiceClient(c, srv.URL, opts...),
		keys:     sluicev1connect.NewKeyServiceClient(c, srv.URL, opts...),
		ovs:      sluicev1connect.NewOverrideServiceClient(c, srv.URL, opts...),
		audit:    sluicev1connect.NewAuditServiceClient(c, srv.URL, opts...),
		config:   sluicev1connect.NewConfigServiceClient(c, srv.URL, opts...),
		reports:  sluicev1connect.NewReportServiceClient(c, srv.URL, opts...),
		deciders: sluicev1connect.NewDeciderServiceClient(c, srv.URL, opts...),
		files:    sluicev1connect.NewTenantFileServiceClient(c, srv.URL, opts...),
	}
}

// call makes one call with key as the bearer (none when "").
func call[Req, Res any](key string, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*Res, error) {
	req := connect.NewRequest(msg)
	if key != "" {
		req.Header().Set("Authorization", "Bearer "+key)
	}
	res, err := f(context.Background(), req)
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// callOK is call for calls that must succeed.
func callOK[Req, Res any](t *testing.T, key string, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) *Res {
	t.Helper()
	res, err := call(key, f, msg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// errOf is the error of a call's answer, the answer dropped.
func errOf(_ any, err error) error { return err }

func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

func ruleMsg(name string) *sluicev1.Rule {
	return &sluicev1.Rule{Name: name, KeyBy: []string{"client_id"}, Enabled: true,
		Match:  []*sluicev1.Match{{Key: "route", Value: "/login"}},
		Params: &sluicev1.LimitParams{Algorithm: sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET, Limit: 10, Window: durationpb.New(time.Minute)}}
}

// ruleOfNewTenant makes a server with a tenant acme (its admin key), its
// tier pro and the tier's rule a.
func ruleOfNewTenant(t *testing.T) (srv *httptest.Server, tenantID, admin string, tier *sluicev1.Tier, rule *sluicev1.Rule) {
	t.Helper()
	srv, _ = newServer(t)
	c := newClients(srv)
	tenantID, admin = setupTenant(t, c, "acme")
	tier = callOK(t, admin, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"}).Tier
	rule = callOK(t, admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tier.Id, Rule: ruleMsg("a")}).Rule
	return srv, tenantID, admin, tier, rule
}

// setupTenant creates a tenant and an admin key for it, as the operator.
func setupTenant(t *testing.T, c clients, slug string) (tenantID, adminKey string) {
	t.Helper()
	tn := callOK(t, operatorKey, c.tenants.CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: slug, Name: slug}})
	k := callOK(t, operatorKey, c.keys.CreateKey, &sluicev1.CreateKeyRequest{TenantId: tn.Tenant.Id, Kind: sluicev1.KeyKind_KEY_KIND_ADMIN, Name: "admin"})
	return tn.Tenant.Id, k.Secret
}

func TestCRUDOverConnectAndGRPC(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
		t.Run(name, func(t *testing.T) {
			c := newClients(srv, opts...)
			tenantID, admin := setupTenant(t, c, "acme-"+name)

			tier := callOK(t, admin, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"}).Tier
			var ids []string
			for _, n := range []string{"a", "b", "c"} {
				r := callOK(t, admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tier.Id, Rule: ruleMsg(n)})
				ids = append(ids, r.Rule.Id)
			}
			upd := ruleMsg("b2")
			upd.Id, upd.Shadow, upd.FailureMode = ids[1], true, sluicev1.FailureMode_FAILURE_MODE_CLOSED
			upd.Params.Burst, upd.Sync, upd.Exact, upd.Block, upd.Replaces = 4, durationpb.New(250*time.Millisecond), true, true, []string{"c"}
			callOK(t, admin, c.rules.UpdateRule, &sluicev1.UpdateRuleRequest{Rule: upd})
			callOK(t, admin, c.rules.ReorderRules, &sluicev1.ReorderRulesRequest{TierId: tier.Id, RuleIds: []string{ids[2], ids[1], ids[0]}})
			callOK(t, admin, c.rules.DeleteRule, &sluicev1.DeleteRuleRequest{RuleId: ids[0]})
			rules := callOK(t, admin, c.rules.ListRules, &sluicev1.ListRulesRequest{TierId: tier.Id}).Rules
			if len(rules) != 2 || rules[0].Name != "c" || rules[1].Name != "b2" || !rules[1].Shadow ||
				rules[1].FailureMode != sluicev1.FailureMode_FAILURE_MODE_CLOSED || rules[1].Params.Burst != 4 ||
				rules[1].Params.Window.AsDuration() != time.Minute || rules[1].Sync.AsDuration() != 250*time.Millisecond || !rules[1].Exact || rules[0].Exact || !rules[1].Block || rules[0].Block ||
				!slices.Equal(rules[1].Replaces, []string{"c"}) || len(rules[0].Replaces) != 0 {
				t.Fatalf("rules after update, reorder and delete: %v", rules)
			}
			tiers := callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}).Tiers
			if len(tiers) != 2 || tiers[1].Name != "pro" || len(tiers[1].Rules) != 2 {
				t.Fatalf("tiers %v", tiers)
			}

			ck := callOK(t, admin, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK, Name: "edge"})
			if ck.Secret == "" || ck.Key.Prefix == "" || ck.Key.RevokedAt != nil {
				t.Fatalf("created key %v", ck)
			}
			callOK(t, admin, c.keys.RevokeKey, &sluicev1.RevokeKeyRequest{KeyId: ck.Key.Id})
			keys := callOK(t, admin, c.keys.ListKeys, &sluicev1.ListKeysRequest{ShowRevoked: true}).Keys
			if len(keys) != 2 || keys[1].RevokedAt == nil || keys[0].LastUsedAt == nil {
				t.Fatalf("keys %v", keys)
			}
			if keys := callOK(t, admin, c.keys.ListKeys, &sluicev1.ListKeysRequest{}).Keys; len(keys) != 1 || keys[0].RevokedAt != nil {
				t.Fatalf("keys not revoked: %v", keys)
			}
			callOK(t, admin, c.tiers.DeleteTier, &sluicev1.DeleteTierRequest{TierId: tier.Id})

			got := callOK(t, operatorKey, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: tenantID}).Tenant
			got.Name = "Acme Corp"
			v := callOK(t, operatorKey, c.tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: got})
			if v.ConfigVersion <= got.ConfigVersion {
				t.Fatalf("update went from version %d to %d", got.ConfigVersion, v.ConfigVersion)
			}
			list := callOK(t, operatorKey, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{}).Tenants
			if !slices.ContainsFunc(list, func(x *sluicev1.Tenant) bool {
				return x.Id == tenantID && x.Name == "Acme Corp" && x.ConfigVersion == v.ConfigVersion
			}) {
				t.Fatalf("list %v", list)
			}
			callOK(t, operatorKey, c.tenants.DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: tenantID})
			if _, err := call(admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}); codeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("a deleted tenant's key: %v", err)
			}
		})
	}
}

func TestInvalidInputHasFieldDetails(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	tiers := callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}).Tiers
	bad := ruleMsg("")
	bad.Params.Limit = 0
	bad.Params.Granularity = durationpb.New(time.Second)
	bad.Match[0].Key = "no spaces"
	bad.Sync = durationpb.New(time.Millisecond)
	_, err := call(admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tiers[0].Id, Rule: bad})
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("invalid rule: %v", err)
	}
	if fields, want := fieldsOf(err), []string{"name", "match[0].key", "limit", "granularity", "sync"}; !slices.Equal(fields, want) {
		t.Fatalf("field violations %v, want %v", fields, want)
	}
	// A missing rule, unknown enum values: still InvalidArgument, never internal.
	for _, r := range []*sluicev1.Rule{nil, {Name: "x", Params: &sluicev1.LimitParams{Algorithm: 42}, FailureMode: 9}} {
		if _, err := call(admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tiers[0].Id, Rule: r}); codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("rule %v: %v", r, err)
		}
	}
	_, err = call(operatorKey, c.tenants.CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "acme", Name: "dup"}})
	if codeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("duplicate slug: %v", err)
	}
}

// A call that leaves an id it needs empty is InvalidArgument naming that
// field; an id given that names nothing (unknown, or not an id at all) is
// NotFound, whoever asks.
func TestEmptyIDsAreInvalidUnknownOnesNotFound(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	tenantID, admin := setupTenant(t, c, "acme")
	type rpc struct {
		name, field string
		call        func(key, id string) error
	}
	rpcs := []rpc{
		{"GetTenant", "tenant_id", func(k, id string) error {
			return errOf(call(k, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: id}))
		}},
		{"UpdateTenant", "tenant.id", func(k, id string) error {
			return errOf(call(k, c.tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: &sluicev1.Tenant{Id: id, Slug: "acme", Name: "acme"}}))
		}},
		{"DeleteTenant", "tenant_id", func(k, id string) error {
			return errOf(call(k, c.tenants.DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: id}))
		}},
		{"DeleteTier", "tier_id", func(k, id string) error {
			return errOf(call(k, c.tiers.DeleteTier, &sluicev1.DeleteTierRequest{TierId: id}))
		}},
		{"RenameTier", "tier_id", func(k, id string) error {
			return errOf(call(k, c.tiers.RenameTier, &sluicev1.RenameTierRequest{TierId: id, Name: "gold"}))
		}},
		{"CreateRule", "tier_id", func(k, id string) error {
			return errOf(call(k, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: id, Rule: ruleMsg("a")}))
		}},
		{"ListRules", "tier_id", func(k, id string) error {
			return errOf(call(k, c.rules.ListRules, &sluicev1.ListRulesRequest{TierId: id}))
		}},
		{"UpdateRule", "rule.id", func(k, id string) error {
			r := ruleMsg("a")
			r.Id = id
			return errOf(call(k, c.rules.UpdateRule, &sluicev1.UpdateRuleRequest{Rule: r}))
		}},
		{"DeleteRule", "rule_id", func(k, id string) error {
			return errOf(call(k, c.rules.DeleteRule, &sluicev1.DeleteRuleRequest{RuleId: id}))
		}},
		{"ReorderRules", "tier_id", func(k, id string) error {
			return errOf(call(k, c.rules.ReorderRules, &sluicev1.ReorderRulesRequest{TierId: id}))
		}},
		{"RevokeKey", "key_id", func(k, id string) error {
			return errOf(call(k, c.keys.RevokeKey, &sluicev1.RevokeKeyRequest{KeyId: id}))
		}},
		{"RotateKey", "key_id", func(k, id string) error {
			return errOf(call(k, c.keys.RotateKey, &sluicev1.RotateKeyRequest{KeyId: id}))
		}},
		{"UpdateOverride", "override.id", func(k, id string) error {
			return errOf(call(k, c.ovs.UpdateOverride, &sluicev1.UpdateOverrideRequest{Override: &sluicev1.Override{Id: id, Identifier: "alice", Tier: "free"}}))
		}},
		{"DeleteOverride", "override_id", func(k, id string) error {
			return errOf(call(k, c.ovs.DeleteOverride, &sluicev1.DeleteOverrideRequest{OverrideId: id}))
		}},
	}
	for _, r := range rpcs {
		key := admin
		if strings.Contains(r.name, "Tenant") {
			key = operatorKey
		}
		err := r.call(key, "")
		if codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(fieldsOf(err), []string{r.field}) {
			t.Errorf("%s without %s: %v (fields %v), want invalid_argument naming it", r.name, r.field, err, fieldsOf(err))
		}
		for _, id := range []string{"not-an-id", "00000000-0000-0000-0000-000000000000"} {
			if err := r.call(key, id); codeOf(err) != connect.CodeNotFound {
				t.Errorf("%s with %s %q: %v, want not_found", r.name, r.field, id, err)
			}
		}
	}
	// The tenant was not touched by any of it.
	if got := callOK(t, operatorKey, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: tenantID}).Tenant; got.Slug != "acme" {
		t.Fatalf("tenant now %v", got)
	}
}

// A NUL in any string of a call, which PostgreSQL's text cannot hold, is
// invalid_argument naming the field, not an internal error, and so are an
// enum's number its enum does not name and a timestamp or duration out of
// range (which binary protobuf carries); for a caller without a key,
// unauthenticated still.
func TestNULInAStringIsAFieldError(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"an override's identifier", errOf(call(admin, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: "a\x00b", Tier: "free"}})), "override.identifier"},
		{"a key's name", errOf(call(admin, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK, Name: "k\x00"})), "name"},
		{"a tenant's name", errOf(call(operatorKey, c.tenants.CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "nul", Name: "N\x00"}})), "tenant.name"},
		{"an audit filter", errOf(call(admin, c.audit.ListAudit, &sluicev1.ListAuditRequest{ResourceId: "\x00"})), "resource_id"},
		{"a prefix", errOf(call(admin, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{IdentifierPrefix: "a\x00"})), "identifier_prefix"},
		{"a match in a list", errOf(call(admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: "x", Rule: &sluicev1.Rule{Name: "r",
			Match: []*sluicev1.Match{{Key: "route", Value: "/\x00"}}}})), "rule.match[0].value"},
		{"an unknown report", errOf(call(admin, c.reports.ExportCSV, &sluicev1.ExportCSVRequest{Report: 99})), "report"},
		{"an unknown breakdown", errOf(call(admin, c.reports.GetBreakdown, &sluicev1.GetBreakdownRequest{By: 7})), "by"},
		{"an unknown algorithm", errOf(call(admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: "x", Rule: &sluicev1.Rule{Name: "r",
			Params: &sluicev1.LimitParams{Algorithm: 42}}})), "rule.params.algorithm"},
		{"a timestamp's nanos", errOf(call(admin, c.reports.GetTimeseries, &sluicev1.GetTimeseriesRequest{From: &timestamppb.Timestamp{Seconds: 1, Nanos: -1},
			To: timestamppb.Now(), Step: durationpb.New(time.Minute)})), "from"},
		{"a timestamp past 9999", errOf(call(admin, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK,
			ExpiresAt: &timestamppb.Timestamp{Seconds: 1 << 40}})), "expires_at"},
		{"a duration past a time.Duration", errOf(call(admin, c.keys.RotateKey, &sluicev1.RotateKeyRequest{KeyId: "x", Grace: &durationpb.Duration{Seconds: 300 * 365 * 86400}})), "grace"},
		{"a duration of mixed signs", errOf(call(admin, c.reports.ExportCSV, &sluicev1.ExportCSVRequest{Step: &durationpb.Duration{Seconds: 60, Nanos: -1}})), "step"},
	} {
		if codeOf(tc.err) != connect.CodeInvalidArgument || !slices.Equal(fieldsOf(tc.err), []string{tc.field}) {
			t.Errorf("%s: %v (fields %v), want invalid_argument on %s", tc.name, tc.err, fieldsOf(tc.err), tc.field)
		}
	}
	if _, err := call("", c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: "a\x00b"}}); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("without a key: %v, want unauthenticated", err)
	}
}

// A Connect-JSON request naming a field its message does not have is
// refused, the field named, where connect-go would drop it: a misspelt
// limit is an error, not a rule created with the default.
func TestUnknownJSONFieldIsRefused(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, admin := setupTenant(t, c, "typo")
	post := func(body string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/sluice.v1.TierService/CreateTier", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"nmae":"gold"}`); code != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") || !strings.Contains(body, "nmae") {
		t.Fatalf("a misspelt field: %d %s", code, body)
	}
	if code, body := post(`{"name":"gold"}`); code != http.StatusOK {
		t.Fatalf("the same request spelt right: %d %s", code, body)
	}
}

// fieldsOf returns the fields an error's BadRequest detail names.
func fieldsOf(err error) []string {
	var fields []string
	var ce *connect.Error
	errors.As(err, &ce)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if br, ok := v.(*errdetails.BadRequest); ok {
				for _, f := range br.FieldViolations {
					fields = append(fields, f.Field)
				}
			}
		}
	}
	return fields
}

// A tenant file goes through the API (here over gRPC) and comes back the
// same; an invalid one is refused with its fields by path, malformed YAML
// as invalid too, and the file's own size bound, larger than other
// requests', holds.
func TestTenantFileOverTheAPI(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv, connect.WithGRPC())
	file := "tenant: shop\nname: Shop\ndefault_tier: free\ntiers:\n  - name: free\n    rules:\n      - name: per-client\n" +
		"        key_by: [client_id]\n        algorithm: token_bucket\n        limit: 10\n        window: 1m\n"
	res := callOK(t, operatorKey, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{Content: []byte(file)})
	if res.TenantId == "" || res.ConfigVersion != 1 || len(res.Changes) != 2 {
		t.Fatalf("apply: %v", res)
	}
	exported := callOK(t, operatorKey, c.files.ExportTenantFile, &sluicev1.ExportTenantFileRequest{TenantId: res.TenantId})
	got, err := tenantfile.Parse(exported.Content)
	if want, _ := tenantfile.Parse([]byte(file)); err != nil || !reflect.DeepEqual(got, want) || exported.Slug != "shop" {
		t.Fatalf("export of %s:\n%s\nwant\n%s", exported.Slug, exported.Content, file)
	}

	_, err = call(operatorKey, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{Content: []byte(strings.Replace(file, "limit: 10", "limit: 0", 1))})
	if codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(fieldsOf(err), []string{"tiers[0].rules[0].limit"}) {
		t.Fatalf("invalid file: %v (fields %v)", err, fieldsOf(err))
	}
	if _, err := call(operatorKey, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{Content: []byte("tenant: [")}); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("malformed YAML: %v", err)
	}
	long := []byte(file + "# " + strings.Repeat("a", 2*MaxRequestBytes) + "\n")
	if _, err := call(operatorKey, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{Content: long}); err != nil {
		t.Fatalf("a file larger than other requests: %v", err)
	}
	huge := []byte(strings.Repeat("#", tenantfile.MaxBytes+128<<10))
	if _, err := call(operatorKey, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{Content: huge}); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("oversized file: %v", err)
	}
}

// Another limiter's configuration imports into a tier, over both
// protocols: Kong's into the tenant named, Envoy's files of a domain
// together; importing again changes nothing; an admin key imports into
// its own tenant only; problems are field errors naming their file.
func TestImportConfigOverTheAPI(t *testing.T) {
	t.Parallel()
	srv, store := newServer(t)
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
		t.Run(name, func(t *testing.T) {
			c := newClients(srv, opts...)
			slug := "shop-" + name
			kong := []byte(`
services:
  - name: orders
    routes: [{name: orders, paths: [/orders, /v2/orders]}]
    plugins: [{name: rate-limiting, config: {minute: 3, limit_by: ip}}]
plugins: [{name: rate-limiting, config: {hour: 100}}]
`)
			req := &sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG, Tenant: slug, Tier: "free", Contents: [][]byte{kong}}
			res := callOK(t, operatorKey, c.files.ImportConfig, req)
			if !res.TenantCreated || res.Tenant != slug || res.Tier != "free" || !slices.Equal(res.Created, []string{"global-hour", "service-orders-minute"}) ||
				len(res.Notes) == 0 || res.ConfigVersion == 0 {
				t.Fatalf("import: %v", res)
			}
			tn, v1, err := store.GetTenantBySlug(context.Background(), slug)
			if err != nil || tn.DefaultTier != "free" {
				t.Fatalf("tenant %+v: %v", tn, err)
			}
			tiers, _ := store.ListTiers(context.Background(), tn.ID)
			if len(tiers) != 1 || len(tiers[0].Rules) != 2 || len(tiers[0].Rules[1].Match) != 2 || !slices.Equal(tiers[0].Rules[1].Replaces, []string{"global-hour"}) {
				t.Fatalf("stored %+v", tiers)
			}
			again := callOK(t, operatorKey, c.files.ImportConfig, req)
			if _, v2, _ := store.GetTenantBySlug(context.Background(), slug); len(again.Unchanged) != 2 || len(again.Created)+len(again.Updated) != 0 || v2 != v1 {
				t.Fatalf("a second import: %v, version %d then %d", again, v1, v2)
			}

			// An admin key: its own tenant, named or not; not another's.
			admin := callOK(t, operatorKey, c.keys.CreateKey, &sluicev1.CreateKeyRequest{TenantId: tn.ID, Kind: sluicev1.KeyKind_KEY_KIND_ADMIN, Name: "admin"}).Secret
			own := &sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG, Tier: "pro", DryRun: true, Contents: [][]byte{kong}}
			if res := callOK(t, admin, c.files.ImportConfig, own); res.Tenant != slug || len(res.Created) != 2 || !res.DryRun {
				t.Fatalf("an admin's import: %v", res)
			}
			own.Tenant = "someone-else"
			if _, err := call(admin, c.files.ImportConfig, own); codeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("an admin's import into another tenant: %v", err)
			}

			// Envoy's files of one domain join; a problem names its file.
			env := func(key string) []byte {
				return []byte("domain: edge-" + name + "\ndescriptors:\n  - key: " + key + "\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
			}
			envoy := &sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_ENVOY, Contents: [][]byte{env("a"), env("b")}}
			if res := callOK(t, operatorKey, c.files.ImportConfig, envoy); !slices.Equal(res.Created, []string{"a", "b"}) || res.Tier != "default" {
				t.Fatalf("envoy import: %v", res)
			}
			for _, tc := range []struct {
				req    *sluicev1.ImportConfigRequest
				fields []string
			}{
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_ENVOY, Contents: [][]byte{env("a"), []byte("domain: x\ndescriptors: [{key: k, rate_limit: {unit: eon, requests_per_unit: 1}}]")}},
					[]string{"contents[1].descriptors[0].rate_limit.unit"}},
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_ENVOY, Contents: [][]byte{env("a"), []byte("domain: other\n")}},
					[]string{"contents[1].domain"}},
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG, Contents: [][]byte{kong}}, []string{"tenant"}},
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG, Tenant: slug,
					Contents: [][]byte{[]byte("plugins: [{name: rate-limiting, consumer: bob, config: {minute: 1}}]")}}, []string{"contents[0].plugins[0]"}},
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG, Tenant: slug,
					Contents: [][]byte{kong, []byte("plugins: [{name: rate-limiting, route: gone, config: {minute: 1}}]")}}, []string{"contents[1].plugins[0].route"}},
				{&sluicev1.ImportConfigRequest{Contents: [][]byte{kong}}, []string{"format"}},
				{&sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG}, []string{"contents"}},
			} {
				_, err := call(operatorKey, c.files.ImportConfig, tc.req)
				if codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(fieldsOf(err), tc.fields) {
					t.Errorf("%v: %v, fields %v; want %v", tc.req, err, fieldsOf(err), tc.fields)
				}
			}
		})
	}
}

// Several tenant files go in one call, all or none: an invalid one is
// named by its index, with its fields under it, and nothing of the others
// is applied; a set larger than one file may be, up to its own bound.
func TestTenantFilesOverTheAPI(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	file := func(slug string, limit int) []byte {
		return fmt.Appendf(nil, "tenant: %s\ndefault_tier: free\ntiers:\n  - name: free\n    rules:\n      - name: per-client\n"+
			"        key_by: [client_id]\n        algorithm: token_bucket\n        limit: %d\n        window: 1m\n", slug, limit)
	}
	_, err := call(operatorKey, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{Files: [][]byte{file("one", 10), file("two", 0)}})
	if codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(fieldsOf(err), []string{"files[1].tiers[0].rules[0].limit"}) {
		t.Fatalf("an invalid file in the set: %v (fields %v)", err, fieldsOf(err))
	}
	tenants := callOK(t, operatorKey, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{})
	if len(tenants.Tenants) != 0 {
		t.Fatalf("a refused set created %v", tenants.Tenants)
	}
	res := callOK(t, operatorKey, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{Files: [][]byte{file("one", 10), file("two", 20)}})
	if len(res.Results) != 2 || res.Results[0].ConfigVersion != 1 || res.Results[1].ConfigVersion != 1 || len(res.Results[1].Changes) != 2 {
		t.Fatalf("results %v", res.Results)
	}
	// Two files of 6 MiB each: more than one file's bound, within the set's.
	pad := "# " + strings.Repeat("a", 6<<20) + "\n"
	big := [][]byte{append(file("one", 11), pad...), append(file("two", 21), pad...)}
	if _, err := call(operatorKey, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{Files: big}); err != nil {
		t.Fatalf("a set larger than one file: %v", err)
	}
	huge := []byte(strings.Repeat("#", tenantfile.MaxBytes+1))
	if _, err := call(operatorKey, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{Files: [][]byte{huge}}); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("an oversized file in a set: %v", err)
	}
	big = append(big, big[0])
	if _, err := call(operatorKey, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{Files: big}); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("an oversized set: %v", err)
	}
}

// TestAuthorizationMatrix calls every RPC with every kind of caller and
// checks the answer: only the operator and the tenant's own admin key get
// past authentication and scoping, only the decider (and a check key, for
// its own tenant) reaches the config service, and nothing of tenant A
// changes under any other key.
func TestAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	srv, store := newServer(t)
	c := newClients(srv)
	tenantA, adminA := setupTenant(t, c, "tenant-a")
	_, adminB := setupTenant(t, c, "tenant-b")
	tierA := callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"}).Tier
	ruleA := callOK(t, adminA, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tierA.Id, Rule: ruleMsg("r")}).Rule
	check := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK}).Secret
	viewerA := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_VIEWER}).Secret
	viewerB := callOK(t, adminB, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_VIEWER}).Secret
	revoked := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_ADMIN})
	callOK(t, adminA, c.keys.RevokeKey, &sluicev1.RevokeKeyRequest{KeyId: revoked.Key.Id})
	_, versionBefore, _ := store.GetTenant(context.Background(), tenantA)

	now, hourAgo := timestamppb.Now(), timestamppb.New(time.Now().Add(-time.Hour))
	// Each RPC aimed at tenant A. Mutations are harmless for this test:
	// they either fail validation after auth or touch throwaway values.
	rpcs := map[string]func(key string) error{
		"CreateTenant": func(k string) error {
			_, err := call(k, c.tenants.CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "x", Name: ""}})
			return err
		},
		"GetTenant": func(k string) error {
			_, err := call(k, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: tenantA})
			return err
		},
		"ListTenants": func(k string) error {
			_, err := call(k, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{})
			return err
		},
		"UpdateTenant": func(k string) error {
			_, err := call(k, c.tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: &sluicev1.Tenant{Id: tenantA, Slug: "tenant-a", Name: ""}})
			return err
		},
		"DeleteTenant": func(k string) error {
			_, err := call(k, c.tenants.DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"CreateTier": func(k string) error {
			_, err := call(k, c.tiers.CreateTier, &sluicev1.CreateTierRequest{TenantId: tenantA, Name: "Not A Slug"})
			return err
		},
		"ListTiers": func(k string) error {
			_, err := call(k, c.tiers.ListTiers, &sluicev1.ListTiersRequest{TenantId: tenantA})
			return err
		},
		"RenameTier": func(k string) error {
			_, err := call(k, c.tiers.RenameTier, &sluicev1.RenameTierRequest{TenantId: tenantA, TierId: "00000000-0000-0000-0000-000000000000", Name: "gold"})
			return err
		},
		"DeleteTier": func(k string) error {
			_, err := call(k, c.tiers.DeleteTier, &sluicev1.DeleteTierRequest{TenantId: tenantA, TierId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"CreateRule": func(k string) error {
			_, err := call(k, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TenantId: tenantA, TierId: tierA.Id, Rule: ruleMsg("")})
			return err
		},
		"ListRules": func(k string) error {
			_, err := call(k, c.rules.ListRules, &sluicev1.ListRulesRequest{TenantId: tenantA, TierId: tierA.Id})
			return err
		},
		"UpdateRule": func(k string) error {
			r := ruleMsg("")
			r.Id = ruleA.Id
			_, err := call(k, c.rules.UpdateRule, &sluicev1.UpdateRuleRequest{TenantId: tenantA, Rule: r})
			return err
		},
		"DeleteRule": func(k string) error {
			_, err := call(k, c.rules.DeleteRule, &sluicev1.DeleteRuleRequest{TenantId: tenantA, RuleId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"ReorderRules": func(k string) error {
			_, err := call(k, c.rules.ReorderRules, &sluicev1.ReorderRulesRequest{TenantId: tenantA, TierId: tierA.Id})
			return err
		},
		"CreateKey": func(k string) error {
			_, err := call(k, c.keys.CreateKey, &sluicev1.CreateKeyRequest{TenantId: tenantA})
			return err
		},
		"ListKeys": func(k string) error {
			_, err := call(k, c.keys.ListKeys, &sluicev1.ListKeysRequest{TenantId: tenantA})
			return err
		},
		"RevokeKey": func(k string) error {
			_, err := call(k, c.keys.RevokeKey, &sluicev1.RevokeKeyRequest{TenantId: tenantA, KeyId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"RotateKey": func(k string) error {
			_, err := call(k, c.keys.RotateKey, &sluicev1.RotateKeyRequest{TenantId: tenantA, KeyId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"CreateOverride": func(k string) error {
			_, err := call(k, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{TenantId: tenantA, Override: &sluicev1.Override{Identifier: "x"}})
			return err
		},
		"ListOverrides": func(k string) error {
			_, err := call(k, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{TenantId: tenantA})
			return err
		},
		"UpdateOverride": func(k string) error {
			_, err := call(k, c.ovs.UpdateOverride, &sluicev1.UpdateOverrideRequest{TenantId: tenantA, Override: &sluicev1.Override{Id: "00000000-0000-0000-0000-000000000000", Identifier: "x", Block: true}})
			return err
		},
		"DeleteOverride": func(k string) error {
			_, err := call(k, c.ovs.DeleteOverride, &sluicev1.DeleteOverrideRequest{TenantId: tenantA, OverrideId: "00000000-0000-0000-0000-000000000000"})
			return err
		},
		"ListAudit": func(k string) error {
			_, err := call(k, c.audit.ListAudit, &sluicev1.ListAuditRequest{TenantId: tenantA})
			return err
		},
		"GetTimeseries": func(k string) error {
			_, err := call(k, c.reports.GetTimeseries, &sluicev1.GetTimeseriesRequest{TenantId: tenantA, From: hourAgo, To: now, Step: durationpb.New(time.Minute)})
			return err
		},
		"GetTopClients": func(k string) error {
			_, err := call(k, c.reports.GetTopClients, &sluicev1.GetTopClientsRequest{TenantId: tenantA, From: hourAgo, To: now})
			return err
		},
		"GetBreakdown": func(k string) error {
			_, err := call(k, c.reports.GetBreakdown, &sluicev1.GetBreakdownRequest{TenantId: tenantA, From: hourAgo, To: now})
			return err
		},
		"ExportCSV": func(k string) error {
			_, err := call(k, c.reports.ExportCSV, &sluicev1.ExportCSVRequest{TenantId: tenantA, From: hourAgo, To: now})
			return err
		},
		"ApplyTenantFile": func(k string) error {
			// A dry run of tenant A's file with another tier: for an
			// admin key of B, another tenant's file.
			_, err := call(k, c.files.ApplyTenantFile, &sluicev1.ApplyTenantFileRequest{DryRun: true, Prune: true,
				Content: []byte("tenant: tenant-a\ntiers:\n  - name: default\n  - name: extra\n")})
			return err
		},
		"ApplyTenantFiles": func(k string) error {
			_, err := call(k, c.files.ApplyTenantFiles, &sluicev1.ApplyTenantFilesRequest{DryRun: true, Prune: true,
				Files: [][]byte{[]byte("tenant: tenant-a\ntiers:\n  - name: default\n  - name: extra\n")}})
			return err
		},
		"ExportTenantFile": func(k string) error {
			_, err := call(k, c.files.ExportTenantFile, &sluicev1.ExportTenantFileRequest{TenantId: tenantA})
			return err
		},
		"ImportConfig": func(k string) error {
			// Tenant A's: for an admin key of B, another tenant's.
			_, err := call(k, c.files.ImportConfig, &sluicev1.ImportConfigRequest{Format: sluicev1.ImportFormat_IMPORT_FORMAT_KONG,
				Tenant: "tenant-a", DryRun: true, Contents: [][]byte{[]byte("plugins: [{name: rate-limiting, config: {minute: 5}}]")}})
			return err
		},
		"ListDeciders": func(k string) error {
			_, err := call(k, c.deciders.ListDeciders, &sluicev1.ListDecidersRequest{})
			return err
		},
		"GetSnapshots": func(k string) error {
			_, err := call(k, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{})
			return err
		},
		"Watch": func(k string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := connect.NewRequest(&sluicev1.WatchRequest{})
			if k != "" {
				req.Header().Set("Authorization", "Bearer "+k)
			}
			st, err := c.config.Watch(ctx, req)
			if err != nil {
				return err
			}
			defer st.Close()
			if st.Receive() { // versions exist: an authorised watch starts with them
				return nil
			}
			return st.Err()
		},
	}
	operatorOnlyRPCs := map[string]bool{"CreateTenant": true, "ListTenants": true, "UpdateTenant": true, "DeleteTenant": true, "ListDeciders": true}
	deciderOnlyRPCs := map[string]bool{"GetSnapshots": true, "Watch": true}
	viewerRPCs := map[string]bool{"GetTenant": true, "ListTiers": true, "ListRules": true, "ListOverrides": true, "ListAudit": true, "ExportTenantFile": true,
		"GetTimeseries": true, "GetTopClients": true, "GetBreakdown": true, "ExportCSV": true}
	denied := []connect.Code{connect.CodePermissionDenied}
	allowed := []connect.Code{0, connect.CodeInvalidArgument, connect.CodeNotFound}
	callers := []struct {
		name, key string
		want      func(rpc string) []connect.Code // acceptable codes (0: success)
	}{
		{"no key", "", func(string) []connect.Code { return []connect.Code{connect.CodeUnauthenticated} }},
		{"malformed key", "not a key at all", func(string) []connect.Code { return []connect.Code{connect.CodeUnauthenticated} }},
		{"revoked key", revoked.Secret, func(string) []connect.Code { return []connect.Code{connect.CodeUnauthenticated} }},
		{"check key", check, func(rpc string) []connect.Code {
			if deciderOnlyRPCs[rpc] {
				return []connect.Code{0} // its own tenant's config (TestCheckKeyDeciderSeesItsTenantOnly)
			}
			return denied
		}},
		{"other tenant's admin", adminB, func(string) []connect.Code { return []connect.Code{connect.CodePermissionDenied} }},
		{"other tenant's viewer", viewerB, func(string) []connect.Code { return []connect.Code{connect.CodePermissionDenied} }},
		{"own viewer", viewerA, func(rpc string) []connect.Code {
			if viewerRPCs[rpc] {
				return []connect.Code{0} // reads that succeed
			}
			return denied
		}},
		{"own admin", adminA, func(rpc string) []connect.Code {
			if operatorOnlyRPCs[rpc] || deciderOnlyRPCs[rpc] {
				return denied
			}
			return allowed
		}},
		{"operator", operatorKey, func(rpc string) []connect.Code {
			if deciderOnlyRPCs[rpc] {
				return denied
			}
			return allowed
		}},
		{"decider", deciderKey, func(rpc string) []connect.Code {
			if deciderOnlyRPCs[rpc] {
				return []connect.Code{0}
			}
			return denied
		}},
	}
	var apiRPCs int
	for _, f := range []protoreflect.FileDescriptor{sluicev1.File_sluice_v1_admin_proto, sluicev1.File_sluice_v1_config_proto, sluicev1.File_sluice_v1_reports_proto} {
		for i := range f.Services().Len() {
			apiRPCs += f.Services().Get(i).Methods().Len()
		}
	}
	if len(rpcs) != apiRPCs {
		t.Fatalf("the matrix covers %d RPCs, the API has %d", len(rpcs), apiRPCs)
	}
	for rpc, f := range rpcs {
		for _, cl := range callers {
			if got, want := codeOf(f(cl.key)), cl.want(rpc); !slices.Contains(want, got) {
				t.Errorf("%s with %s: code %v, want one of %v", rpc, cl.name, got, want)
			}
		}
	}
	// Nothing above changed tenant A's configuration.
	if _, v, _ := store.GetTenant(context.Background(), tenantA); v != versionBefore {
		t.Fatalf("tenant A went from version %d to %d", versionBefore, v)
	}
	// Tenant B's admin key, naming A's rule in its own tenant, finds nothing.
	if _, err := call(adminB, c.rules.DeleteRule, &sluicev1.DeleteRuleRequest{RuleId: ruleA.Id}); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("B deleting A's rule: %v", err)
	}
	if rules := callOK(t, adminA, c.rules.ListRules, &sluicev1.ListRulesRequest{TierId: tierA.Id}).Rules; len(rules) != 1 {
		t.Fatalf("A's rules: %v", rules)
	}
}

// During a rotation the control plane accepts each of several operator
// and decider secrets (comma-separated), and no other.
func TestSeveralOperatorAndDeciderKeys(t *testing.T) {
	t.Parallel()
	srv, _ := newServerWith(t, func(c *HandlerConfig) {
		c.OperatorKey, c.DeciderKey = "sk_operator_old, sk_operator_new", "decider-old,decider-new"
	})
	c := newClients(srv)
	for key, want := range map[string]connect.Code{"sk_operator_old": 0, "sk_operator_new": 0, "sk_operator_old,sk_operator_new": connect.CodeUnauthenticated,
		"sk_operator": connect.CodeUnauthenticated, "decider-new": connect.CodePermissionDenied} {
		if _, err := call(key, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{}); codeOf(err) != want {
			t.Errorf("ListTenants with %q: %v, want %v", key, err, want)
		}
	}
	for key, want := range map[string]connect.Code{"decider-old": 0, "decider-new": 0, "decider": connect.CodeUnauthenticated} {
		if _, err := call(key, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}); codeOf(err) != want {
			t.Errorf("GetSnapshots with %q: %v, want %v", key, err, want)
		}
	}
}

// Keys asked of OperatorKeyFunc and DeciderKeyFunc (a key file, reread)
// take effect at the next call: a rotation without a restart.
func TestOperatorAndDeciderKeysFromFuncs(t *testing.T) {
	t.Parallel()
	var operator, decider atomic.Pointer[string]
	set := func(p *atomic.Pointer[string], s string) { p.Store(&s) }
	set(&operator, "sk_operator_old")
	set(&decider, "decider-old")
	srv, _ := newServerWith(t, func(c *HandlerConfig) {
		c.OperatorKey, c.DeciderKey = "ignored", "ignored"
		c.OperatorKeyFunc, c.DeciderKeyFunc = func() string { return *operator.Load() }, func() string { return *decider.Load() }
	})
	c := newClients(srv)
	expect := func(stage string, ops, decs map[string]connect.Code) {
		t.Helper()
		for key, want := range ops {
			if _, err := call(key, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{}); codeOf(err) != want {
				t.Errorf("%s: ListTenants with %q: %v, want %v", stage, key, err, want)
			}
		}
		for key, want := range decs {
			if _, err := call(key, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}); codeOf(err) != want {
				t.Errorf("%s: GetSnapshots with %q: %v, want %v", stage, key, err, want)
			}
		}
	}
	expect("before", map[string]connect.Code{"sk_operator_old": 0, "sk_operator_new": connect.CodeUnauthenticated, "ignored": connect.CodeUnauthenticated},
		map[string]connect.Code{"decider-old": 0, "decider-new": connect.CodeUnauthenticated})
	set(&operator, "sk_operator_new")
	set(&decider, "decider-new, decider-old")
	expect("after", map[string]connect.Code{"sk_operator_old": connect.CodeUnauthenticated, "sk_operator_new": 0},
		map[string]connect.Code{"decider-old": 0, "decider-new": 0})
}

// With a Tracer, each unary call is a span named for its procedure in the
// caller's trace, refusals included.
func TestCallsAreTraced(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	srv, _ := newServerWith(t, func(c *HandlerConfig) {
		c.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	})
	c := newClients(srv)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, key := range []string{operatorKey, "sk_wrong"} {
		req := connect.NewRequest(&sluicev1.ListTenantsRequest{})
		req.Header().Set("Authorization", "Bearer "+key)
		req.Header().Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		_, _ = c.tenants.ListTenants(context.Background(), req)
	}
	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want 2", len(ended))
	}
	for i, code := range []string{"ok", "unauthenticated"} {
		s := ended[i]
		var got string
		for _, a := range s.Attributes() {
			if a.Key == "rpc.connect_rpc.code" {
				got = a.Value.AsString()
			}
		}
		if s.Name() != sluicev1connect.TenantServiceListTenantsProcedure || s.SpanContext().TraceID().String() != traceID || got != code {
			t.Errorf("span %d: %q in trace %s, code %q; want the procedure in %s, %q", i, s.Name(), s.SpanContext().TraceID(), got, traceID, code)
		}
	}
}

func TestOversizedRequestIsRefused(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	huge := make([]byte, MaxRequestBytes+1)
	for i := range huge {
		huge[i] = 'a'
	}
	_, err := call(operatorKey, c.tenants.CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "x", Name: string(huge)}})
	if codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("oversized request: %v", err)
	}
}

func TestConfigServiceSnapshotsAndWatch(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	a, adminA := setupTenant(t, c, "a")
	b, _ := setupTenant(t, c, "b")
	ck := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK})

	all := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{})
	since := map[string]int64{}
	for _, s := range all.Snapshots {
		since[s.Tenant.Id] = s.Version
		if s.Tenant.Id == a && len(s.CheckKeyHashes) != 1 {
			t.Fatalf("tenant a's snapshot has %d check keys, want 1 (%s…)", len(s.CheckKeyHashes), ck.Key.Prefix)
		}
	}
	if len(all.Snapshots) != 2 || since[a] == 0 || since[b] == 0 {
		t.Fatalf("snapshots %v", all.Snapshots)
	}
	if none := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: since}); len(none.Snapshots) != 0 {
		t.Fatalf("up to date, yet %d snapshots", len(none.Snapshots))
	}
	// A named decider's sync shows in the operator's list, with what it
	// enforces once it applies the answer: b's latest, a's it had.
	stale := map[string]int64{a: since[a], b: since[b] - 1}
	health := &sluicev1.DeciderHealth{Breaker: "open", EngineErrors: 7, EventsSpooled: 1200, EventsQueued: 3, EventsDropped: 2,
		Region: "eu-west", SilentRegions: []string{"us-east"}}
	callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: stale, Decider: "host-1/42", Health: health})
	ds := callOK(t, operatorKey, c.deciders.ListDeciders, &sluicev1.ListDecidersRequest{}).Deciders
	if len(ds) != 1 || ds[0].Name != "host-1/42" || ds[0].ConfigVersions[a] != since[a] || ds[0].ConfigVersions[b] != since[b] ||
		time.Since(ds[0].LastSyncedAt.AsTime()) > time.Minute || !proto.Equal(ds[0].Health, health) {
		t.Fatalf("deciders %v", ds)
	}
	// The next sync's report replaces it; a breaker state not among the
	// three is not shown, and a region's name is cut to its bound.
	callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: since, Decider: "host-1/42",
		Health: &sluicev1.DeciderHealth{Breaker: "<script>", EventsQueued: 1, Region: strings.Repeat("r", 100)}})
	ds = callOK(t, operatorKey, c.deciders.ListDeciders, &sluicev1.ListDecidersRequest{}).Deciders
	if len(ds) != 1 || !proto.Equal(ds[0].Health, &sluicev1.DeciderHealth{EventsQueued: 1, Region: policy.FitValue(strings.Repeat("r", 100), 64)}) {
		t.Fatalf("deciders after a second sync %v", ds)
	}

	st := watchWith(t, c, deciderKey, since)
	callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"})
	callOK(t, operatorKey, c.tenants.DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: b})
	var got []string
	for len(got) < 2 && st.Receive() {
		m := st.Msg()
		got = append(got, fmt.Sprintf("%s:%d:%v", m.TenantId, m.Version, m.Deleted))
	}
	want := []string{fmt.Sprintf("%s:%d:false", a, since[a]+1), fmt.Sprintf("%s:%d:true", b, since[b]+1)}
	if !slices.Equal(got, want) {
		t.Fatalf("watch delivered %v, want %v (err %v)", got, want, st.Err())
	}
	upd := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: since})
	if len(upd.Snapshots) != 1 || upd.Snapshots[0].Version != since[a]+1 || !slices.Equal(upd.DeletedTenantIds, []string{b}) {
		t.Fatalf("after the changes: %v", upd)
	}
}

// watchWith opens a config watch with key from since, closed (and given
// up after 20 s) when the test ends.
func watchWith(t *testing.T, c clients, key string, since map[string]int64) *connect.ServerStreamForClient[sluicev1.WatchResponse] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req := connect.NewRequest(&sluicev1.WatchRequest{Since: since})
	req.Header().Set("Authorization", "Bearer "+key)
	st, err := c.config.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A decider that signs in with a tenant's check key (a sidecar proxy of
// that tenant) is a decider of that tenant alone: its snapshots, its
// versions, its changes on the watch; nothing of any other tenant, not
// even that one was deleted.
func TestCheckKeyDeciderSeesItsTenantOnly(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	a, adminA := setupTenant(t, c, "scoped-a")
	b, adminB := setupTenant(t, c, "scoped-b")
	checkA := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK}).Secret

	all := callOK(t, checkA, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{"gone-tenant": 3}})
	if len(all.Snapshots) != 1 || all.Snapshots[0].Tenant.Id != a || len(all.DeletedTenantIds) != 0 {
		t.Fatalf("a's check key got %d snapshots (%v) and deletions %v; want a's alone", len(all.Snapshots), all.Snapshots, all.DeletedTenantIds)
	}
	since := map[string]int64{a: all.Snapshots[0].Version}

	st := watchWith(t, c, checkA, since)
	callOK(t, adminB, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"})
	callOK(t, operatorKey, c.tenants.DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: b})
	callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"})
	if !st.Receive() {
		t.Fatalf("watch: %v", st.Err())
	}
	if m := st.Msg(); m.TenantId != a || m.Version != since[a]+1 {
		t.Fatalf("a's check key watched %s:%d, want only a's change %s:%d", m.TenantId, m.Version, a, since[a]+1)
	}
	// Asking about b by name gets nothing either; and its report lands on
	// a row of its own, not on the decider whose name it gives.
	callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Decider: "host-1/42"})
	upd := callOK(t, checkA, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: since[a], b: 1},
		Decider: "host-1/42", Health: &sluicev1.DeciderHealth{Breaker: "open"}})
	if len(upd.Snapshots) != 1 || upd.Snapshots[0].Tenant.Id != a || len(upd.DeletedTenantIds) != 0 {
		t.Fatalf("after the changes: %v", upd)
	}
	var names []string
	for _, d := range callOK(t, operatorKey, c.deciders.ListDeciders, &sluicev1.ListDecidersRequest{}).Deciders {
		names = append(names, d.Name)
		if d.Name == "host-1/42" && d.Health.GetBreaker() == "open" {
			t.Fatal("a check key's report changed another decider's row")
		}
	}
	if want := "host-1/42 [tenant " + a + "]"; !slices.Contains(names, want) {
		t.Fatalf("deciders %v, want one named %q", names, want)
	}
}

func TestOverridesAndAuditOverTheAPI(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
		t.Run(name, func(t *testing.T) { overridesAndAudit(t, newClients(srv, opts...), "acme-"+name) })
	}
}

func overridesAndAudit(t *testing.T, c clients, slug string) {
	_, admin := setupTenant(t, c, slug)
	callOK(t, admin, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"})
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	o := callOK(t, admin, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{
		Identifier: "vip-*", Tier: "pro", ExpiresAt: timestamppb.New(exp)}}).Override
	_, err := call(admin, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: "x", Tier: "gold"}})
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("override of a missing tier: %v", err)
	}
	list := callOK(t, admin, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{}).Overrides
	if len(list) != 1 || list[0].Identifier != "vip-*" || !list[0].ExpiresAt.AsTime().Equal(exp) || list[0].DescriptorKey != "client_id" {
		t.Fatalf("overrides %v", list)
	}
	// Changed in place: the client moves back, conditioned on the etag read.
	list[0].Tier = "default"
	callOK(t, admin, c.ovs.UpdateOverride, &sluicev1.UpdateOverrideRequest{Override: list[0]})
	if _, err := call(admin, c.ovs.UpdateOverride, &sluicev1.UpdateOverrideRequest{Override: list[0]}); codeOf(err) != connect.CodeAborted {
		t.Fatalf("an override updated with a stale etag: %v", err)
	}
	if got := callOK(t, admin, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{}).Overrides; len(got) != 1 || got[0].Tier != "default" || got[0].Id != o.Id {
		t.Fatalf("after the update: %v", got)
	}
	callOK(t, admin, c.ovs.DeleteOverride, &sluicev1.DeleteOverrideRequest{OverrideId: o.Id})
	audit := callOK(t, admin, c.audit.ListAudit, &sluicev1.ListAuditRequest{Limit: 2}).Entries
	if len(audit) != 2 || audit[0].Action != "delete" || audit[0].Resource != "override" || audit[1].Action != "update" ||
		!strings.HasPrefix(audit[0].Actor, "key:") || audit[0].OldValue == "" || audit[0].ConfigVersion <= audit[1].ConfigVersion {
		t.Fatalf("audit %v", audit)
	}
	older := callOK(t, admin, c.audit.ListAudit, &sluicev1.ListAuditRequest{BeforeId: audit[1].Id}).Entries
	if len(older) == 0 || older[0].Id >= audit[1].Id {
		t.Fatalf("paging: %v", older)
	}
	// A page before a negative id, or of a size out of range, is no page:
	// invalid_argument naming the field, not an empty answer.
	for _, tc := range []struct {
		req   *sluicev1.ListAuditRequest
		field string
	}{{&sluicev1.ListAuditRequest{BeforeId: -1}, "before_id"}, {&sluicev1.ListAuditRequest{Limit: 5000}, "limit"}, {&sluicev1.ListAuditRequest{Limit: -1}, "limit"}} {
		_, err := call(admin, c.audit.ListAudit, tc.req)
		if codeOf(err) != connect.CodeInvalidArgument || !slices.Contains(fieldsOf(err), tc.field) {
			t.Fatalf("ListAudit %v: %v, want invalid_argument on %s", tc.req, err, tc.field)
		}
	}

	// A block of the client: no tier, no params.
	_, err = call(admin, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: "bad", Block: true, Tier: "pro"}})
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a block with a tier: %v", err)
	}
	callOK(t, admin, c.ovs.CreateOverride, &sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: "bad", Block: true}})
	if list := callOK(t, admin, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{}).Overrides; len(list) != 1 || !list[0].Block || list[0].Tier != "" {
		t.Fatalf("overrides %v", list)
	}
}

// The API counts its calls by procedure and answer, refusals of the
// authentication included, and gauges the open config watches.
func TestAPIMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	store := pgstore.New(pgtest.Pool(t))
	cfg := HandlerConfig{OperatorKey: operatorKey, DeciderKey: deciderKey, Registerer: reg}.OnPostgres(store, time.Minute)
	srv := httptest.NewUnstartedServer(NewHandler(cfg))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{})
	callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{})
	if _, err := call("", c.tiers.ListTiers, &sluicev1.ListTiersRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatal(err)
	}
	if _, err := call(admin, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "Not A Slug"}); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatal(err)
	}
	// Unkey's override calls are counted as calls of their own.
	unkeyReq, _ := http.NewRequest("POST", srv.URL+"/v2/ratelimit.getOverride", strings.NewReader(`{"namespace":"api","identifier":"x"}`))
	unkeyReq.Header.Set("Authorization", "Bearer "+admin)
	if resp, err := srv.Client().Do(unkeyReq); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("getOverride: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req := connect.NewRequest(&sluicev1.WatchRequest{})
	req.Header().Set("Authorization", "Bearer "+deciderKey)
	st, err := c.config.Watch(ctx, req)
	if err != nil || !st.Receive() {
		t.Fatalf("watch: %v", err)
	}

	value := func(name string, labels ...string) float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		metric:
			for _, m := range f.GetMetric() {
				for i, l := range m.GetLabel() {
					if i*2+1 >= len(labels) || l.GetName() != labels[i*2] || l.GetValue() != labels[i*2+1] {
						continue metric
					}
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		return 0
	}
	list := sluicev1connect.TierServiceListTiersProcedure
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_api_calls_total", []string{"code", "ok", "procedure", list}, 2},
		{"sluice_api_calls_total", []string{"code", "unauthenticated", "procedure", list}, 1},
		{"sluice_api_calls_total", []string{"code", "invalid_argument", "procedure", sluicev1connect.TierServiceCreateTierProcedure}, 1},
		{"sluice_api_call_seconds", []string{"procedure", list}, 3},
		{"sluice_api_calls_total", []string{"code", "not_found", "procedure", "/v2/ratelimit.getOverride"}, 1},
		{"sluice_config_watches", nil, 1},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	cancel()
	st.Close()
	for deadline := time.Now().Add(10 * time.Second); value("sluice_config_watches") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watch gauge stayed up after the stream closed")
		}
	}
}

// TestConcurrentEditsLoseNothing: editors that each read a rule, add one
// to its limit and write it back with the etag they read, reading again
// when refused, leave the limit raised by exactly their number: no edit is
// lost to another that came between its read and its write. A stale etag
// is refused with Aborted and a message that says what to do, over gRPC as
// well.
func TestConcurrentEditsLoseNothing(t *testing.T) {
	t.Parallel()
	srv, tenantID, admin, tier, created := ruleOfNewTenant(t)
	c := newClients(srv)
	if created.Etag == "" {
		t.Fatal("a created rule has no etag")
	}

	const editors = 12
	var wg sync.WaitGroup
	var aborted atomic.Int64
	errs := make(chan error, editors)
	for range editors {
		wg.Go(func() {
			for {
				rules, err := call(admin, c.rules.ListRules, &sluicev1.ListRulesRequest{TierId: tier.Id})
				if err != nil {
					errs <- err
					return
				}
				r := rules.Rules[0]
				r.Params.Limit++
				_, err = call(admin, c.rules.UpdateRule, &sluicev1.UpdateRuleRequest{Rule: r})
				if codeOf(err) == connect.CodeAborted {
					aborted.Add(1)
					continue
				}
				if err != nil {
					errs <- err
				}
				return
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tiers := callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}).Tiers
	i := slices.IndexFunc(tiers, func(x *sluicev1.Tier) bool { return x.Id == tier.Id })
	got := tiers[i].Rules[0]
	if want := created.Params.Limit + editors; got.Params.Limit != want {
		t.Fatalf("limit %d after %d edits of +1 from %d (%d retried): edits were lost", got.Params.Limit, editors, created.Params.Limit, aborted.Load())
	}
	t.Logf("%d edits, %d refused and retried", editors, aborted.Load())

	listed := callOK(t, admin, c.rules.ListRules, &sluicev1.ListRulesRequest{TierId: tier.Id}).Rules[0]
	if listed.Etag != got.Etag || listed.Etag == created.Etag {
		t.Fatalf("etags: created %s, now listed %s and in its tier %s", created.Etag, listed.Etag, got.Etag)
	}
	grpc := newClients(srv, connect.WithGRPC())
	stale := ruleMsg("a")
	stale.Id, stale.Etag = created.Id, created.Etag
	_, err := call(admin, grpc.rules.UpdateRule, &sluicev1.UpdateRuleRequest{Rule: stale})
	if codeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), "read it again") {
		t.Fatalf("an update with a stale etag: %v", err)
	}

	tn := callOK(t, operatorKey, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: tenantID}).Tenant
	first, second := proto.Clone(tn).(*sluicev1.Tenant), proto.Clone(tn).(*sluicev1.Tenant)
	first.Shadow, second.Name = true, "Acme Corp"
	callOK(t, operatorKey, c.tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: first})
	if _, err := call(operatorKey, grpc.tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: second}); codeOf(err) != connect.CodeAborted {
		t.Fatalf("a tenant update with a stale etag: %v", err)
	}
	if now := callOK(t, operatorKey, c.tenants.GetTenant, &sluicev1.GetTenantRequest{TenantId: tenantID}).Tenant; !now.Shadow || now.Name != tn.Name {
		t.Fatalf("tenant after a refused update: %v", now)
	}
}

// TestTenantsInPages: ListTenants answers pages of 100 by default, by
// slug, and following next_page_token visits each tenant once; a slug
// prefix finds some among them; a token no page gave is invalid_argument.
func TestTenantsInPages(t *testing.T) {
	t.Parallel()
	srv, store := newServer(t)
	c := newClients(srv)
	const n = 205
	for i := range n {
		if _, err := store.CreateTenant(context.Background(), "test", policy.Tenant{Slug: fmt.Sprintf("shop-%03d", i), Name: "Shop"}); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(req *sluicev1.ListTenantsRequest) ([]string, []int) {
		return readPages(t, operatorKey, c.tenants.ListTenants, req,
			func(r *sluicev1.ListTenantsRequest, token string) { r.PageToken = token },
			func(r *sluicev1.ListTenantsResponse) []string { return mapped(r.Tenants, (*sluicev1.Tenant).GetSlug) })
	}
	if seen, sizes := pages(&sluicev1.ListTenantsRequest{}); len(seen) != n || !slices.IsSorted(seen) || len(slices.Compact(seen)) != n || !slices.Equal(sizes, []int{100, 100, 5}) {
		t.Fatalf("%d tenants seen in pages of %v", len(seen), sizes)
	}
	if seen, sizes := pages(&sluicev1.ListTenantsRequest{SlugPrefix: "shop-12", PageSize: 6}); !slices.Equal(sizes, []int{6, 4}) || seen[0] != "shop-120" || seen[9] != "shop-129" {
		t.Fatalf("prefix shop-12, 6 a page: %v in pages of %v", seen, sizes)
	}
	wantBadTokens(t, func(token string) error {
		_, err := call(operatorKey, c.tenants.ListTenants, &sluicev1.ListTenantsRequest{PageToken: token})
		return err
	}, pageToken("shop-001"), "shop-001\x00x", "\xff")
}

// TestOverridesInPages: ListOverrides answers pages of 100 by default, and
// following next_page_token visits each override once; a prefix finds one
// client's among them; a token no page gave is invalid_argument.
func TestOverridesInPages(t *testing.T) {
	t.Parallel()
	srv, store := newServer(t)
	c := newClients(srv)
	tenantID, admin := setupTenant(t, c, "acme")
	const n = 230
	for i := range n {
		if _, _, err := store.CreateOverride(context.Background(), "test", tenantID, policy.Override{Identifier: fmt.Sprintf("client-%03d", i), Block: true}); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(req *sluicev1.ListOverridesRequest) ([]string, []int) {
		return readPages(t, admin, c.ovs.ListOverrides, req,
			func(r *sluicev1.ListOverridesRequest, token string) { r.PageToken = token },
			func(r *sluicev1.ListOverridesResponse) []string {
				return mapped(r.Overrides, (*sluicev1.Override).GetIdentifier)
			})
	}
	if seen, sizes := pages(&sluicev1.ListOverridesRequest{}); len(seen) != n || len(slices.Compact(seen)) != n || !slices.Equal(sizes, []int{100, 100, 30}) {
		t.Fatalf("%d overrides seen in pages of %v", len(seen), sizes)
	}
	if seen, sizes := pages(&sluicev1.ListOverridesRequest{IdentifierPrefix: "client-12", PageSize: 5}); !slices.Equal(sizes, []int{5, 5}) || seen[0] != "client-120" || seen[9] != "client-129" {
		t.Fatalf("prefix client-12, 5 a page: %v in pages of %v", seen, sizes)
	}
	wantBadTokens(t, func(token string) error {
		_, err := call(admin, c.ovs.ListOverrides, &sluicev1.ListOverridesRequest{PageToken: token})
		return err
	}, pageToken("client-001", tenantID), "no-nul", "client-001\x00not-a-uuid", "\xff\x00"+tenantID)
}

// TestAuditHistory: a rule's history is its entries alone, newest first,
// each saying which fields it changed and from what to what.
func TestAuditHistory(t *testing.T) {
	t.Parallel()
	srv, _, admin, tier, r := ruleOfNewTenant(t)
	c := newClients(srv)
	callOK(t, admin, c.rules.CreateRule, &sluicev1.CreateRuleRequest{TierId: tier.Id, Rule: ruleMsg("b")})
	before := r.Params.Limit
	r.Params.Limit = before * 2
	r.Params.Window = durationpb.New(90 * time.Second)
	callOK(t, admin, c.rules.UpdateRule, &sluicev1.UpdateRuleRequest{Rule: r})
	history := callOK(t, admin, c.audit.ListAudit, &sluicev1.ListAuditRequest{ResourceId: r.Id}).Entries
	if len(history) != 2 || history[0].Action != "update" || history[1].Action != "create" {
		t.Fatalf("rule a's history: %v", history)
	}
	if name := history[0].ActorName; !strings.HasPrefix(name, "admin (sk_admin_") || !strings.HasSuffix(name, "…)") || history[0].Actor == name {
		t.Fatalf("the change's actor %s is named %q", history[0].Actor, name)
	}
	changes := mapped(history[0].Changes, func(c *sluicev1.AuditChange) string { return c.Field + ": " + c.Old + " → " + c.New })
	want := []string{fmt.Sprintf("limit: %d → %d", before, before*2), "window: 1m0s → 1m30s"}
	if !slices.Equal(changes, want) {
		t.Fatalf("the update changed %q, want %q", changes, want)
	}
	if created := mapped(history[1].Changes, (*sluicev1.AuditChange).GetField); !slices.Contains(created, "name") || !slices.Contains(created, "limit") || slices.Contains(created, "burst") {
		t.Fatalf("the creation set %q", created)
	}
	// The values whole, in the API's names.
	var after map[string]any
	if err := json.Unmarshal([]byte(history[0].NewValue), &after); err != nil || after["algorithm"] != "token_bucket" ||
		after["window"] != "1m30s" || after["limit"] != float64(before*2) || after["name"] != "a" {
		t.Fatalf("the update's new value %s (%v)", history[0].NewValue, err)
	}
	if all := callOK(t, admin, c.audit.ListAudit, &sluicev1.ListAuditRequest{}).Entries; len(all) <= 3 {
		t.Fatalf("the whole log: %d entries", len(all))
	}
}

// TestKeysInPages: ListKeys answers the keys not revoked, oldest first,
// in pages; show_revoked adds the revoked ones; a token no page gave is
// invalid_argument.
func TestKeysInPages(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	want, wantAll := []string{"admin"}, []string{"admin"}
	for i := range 9 {
		name := fmt.Sprintf("ci-%d", i)
		k := callOK(t, admin, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK, Name: name})
		wantAll = append(wantAll, name)
		if i%3 == 0 {
			callOK(t, admin, c.keys.RevokeKey, &sluicev1.RevokeKeyRequest{KeyId: k.Key.Id})
		} else {
			want = append(want, name)
		}
	}
	pages := func(req *sluicev1.ListKeysRequest) ([]string, []int) {
		return readPages(t, admin, c.keys.ListKeys, req,
			func(r *sluicev1.ListKeysRequest, token string) { r.PageToken = token },
			func(r *sluicev1.ListKeysResponse) []string { return mapped(r.Keys, (*sluicev1.ApiKey).GetName) })
	}
	if got, sizes := pages(&sluicev1.ListKeysRequest{PageSize: 4}); !slices.Equal(got, want) || !slices.Equal(sizes, []int{4, 3}) {
		t.Fatalf("keys %q in pages of %v, want %q", got, sizes, want)
	}
	if got, sizes := pages(&sluicev1.ListKeysRequest{PageSize: 4, ShowRevoked: true}); !slices.Equal(got, wantAll) || !slices.Equal(sizes, []int{4, 4, 2}) {
		t.Fatalf("keys with the revoked %q in pages of %v, want %q", got, sizes, wantAll)
	}
	first := callOK(t, admin, c.keys.ListKeys, &sluicev1.ListKeysRequest{PageSize: 1})
	wantBadTokens(t, func(token string) error {
		_, err := call(admin, c.keys.ListKeys, &sluicev1.ListKeysRequest{PageToken: token})
		return err
	}, first.NextPageToken, "yesterday\x00"+first.Keys[0].Id, time.Now().Format(time.RFC3339Nano)+"\x00not-a-uuid", "no-nul")
}

// readPages lists from req's page to the last, following next_page_token,
// and answers the names of what it listed (items names a page's) and the
// size of each page.
func readPages[Req, Res any, PRes interface {
	*Res
	GetNextPageToken() string
}](t *testing.T, key string, list func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req,
	setToken func(*Req, string), items func(PRes) []string) (names []string, sizes []int) {
	t.Helper()
	for {
		res := PRes(callOK(t, key, list, req))
		names = append(names, items(res)...)
		sizes = append(sizes, len(items(res)))
		if res.GetNextPageToken() == "" {
			return names, sizes
		}
		setToken(req, res.GetNextPageToken())
	}
}

// mapped is f of each of xs.
func mapped[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

// wantBadTokens has list take good (a token a page gave) and refuse, as
// an invalid page_token, tokens no page gave: not base64, good with a
// newline in it (which base64 decoders skip), and the base64 of each of
// contents.
func wantBadTokens(t *testing.T, list func(token string) error, good string, contents ...string) {
	t.Helper()
	if err := list(good); err != nil {
		t.Fatalf("token %q: %v", good, err)
	}
	tokens := []string{"%%%", "\r" + good, good[:2] + "\n" + good[2:]}
	for _, c := range contents {
		tokens = append(tokens, base64.RawURLEncoding.EncodeToString([]byte(c)))
	}
	for _, token := range tokens {
		if err := list(token); codeOf(err) != connect.CodeInvalidArgument || !slices.Contains(fieldsOf(err), "page_token") {
			t.Fatalf("token %q: %v", token, err)
		}
	}
}

// After the database went back to an earlier state (a backup restored), a
// decider still holds a later version of a tenant than the database: its
// next pull raises the tenant's version past the decider's and sends the
// database's configuration, which is then the latest again, with an audit
// row saying so; the next pull finds nothing to do. A tenant's check key
// (a one-tenant decider, held by applications) raises no version, its
// tenant's or another's.
func TestConfigServiceResyncsAfterTheDatabaseWentBack(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	a, adminA := setupTenant(t, c, "a")
	b, adminB := setupTenant(t, c, "b")
	all := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{})
	versions := map[string]int64{}
	for _, s := range all.Snapshots {
		versions[s.Tenant.Id] = s.Version
	}

	// The decider had received five more versions of a that the restored
	// database never saw.
	held := map[string]int64{a: versions[a] + 5, b: versions[b]}
	got := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: held, Decider: "host-1/7"})
	if len(got.Snapshots) != 1 || got.Snapshots[0].Tenant.Id != a || got.Snapshots[0].Version != held[a]+1 {
		t.Fatalf("snapshots after the database went back: %v, want a's at version %d", got.Snapshots, held[a]+1)
	}
	if again := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: held[a] + 1, b: versions[b]}}); len(again.Snapshots) != 0 {
		t.Fatalf("a second pull, caught up: %v", again.Snapshots)
	}
	audit := callOK(t, adminA, c.audit.ListAudit, &sluicev1.ListAuditRequest{}).Entries
	if len(audit) == 0 || audit[0].Action != "resync" || audit[0].Actor != "decider" || audit[0].ConfigVersion != held[a]+1 ||
		!strings.Contains(audit[0].OldValue, fmt.Sprint(versions[a])) {
		t.Fatalf("a's latest audit entry: %v", audit[:min(len(audit), 1)])
	}

	// A decider watching again from a later version than b's is sent the
	// raised one at once.
	st := watchWith(t, c, deciderKey, map[string]int64{a: held[a] + 1, b: versions[b] + 2})
	if !st.Receive() || st.Msg().TenantId != b || st.Msg().Version != versions[b]+3 {
		t.Fatalf("the watch from a later version of b: %v %v, want b at %d", st.Msg(), st.Err(), versions[b]+3)
	}

	// A claim past any plausible loss is ignored: no version near the
	// end of int64, none over it.
	callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: math.MaxInt64}})
	if vs := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}).Snapshots; len(vs) != 2 ||
		max(vs[0].Version, vs[1].Version) > held[a]+1 {
		t.Fatalf("versions after a claim of MaxInt64: %v", vs)
	}

	ckB := callOK(t, adminB, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK})
	current := func() map[string]int64 {
		out := map[string]int64{}
		for _, s := range callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}).Snapshots {
			out[s.Tenant.Id] = s.Version
		}
		return out
	}
	before := current()
	// A tenant's own decider, on b's check key, ahead of the database: it
	// is sent the database's snapshot of b (and nothing of a), which it
	// then holds; versions stay.
	sidecar := callOK(t, ckB.Secret, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: held[a] + 100, b: versions[b] + 100}})
	if len(sidecar.Snapshots) != 1 || sidecar.Snapshots[0].Tenant.Id != b || sidecar.Snapshots[0].Version != before[b] {
		t.Fatalf("a check key's pull from a later version of b: %v, want b's at the database's version %d", sidecar.Snapshots, before[b])
	}
	if again := callOK(t, ckB.Secret, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{b: before[b]}}); len(again.Snapshots) != 0 {
		t.Fatalf("a check key's second pull, caught up: %v", again.Snapshots)
	}
	st = watchWith(t, c, ckB.Secret, map[string]int64{b: versions[b] + 200})
	if after := current(); !maps.Equal(before, after) {
		t.Fatalf("a check key's pull and watch changed versions: %v, then %v", before, after)
	}
	// Its watch, from a later version than the database's, announces b's
	// version at once, and the next change of b all the same.
	if !st.Receive() || st.Msg().TenantId != b || st.Msg().Version != before[b] {
		t.Fatalf("a check key's watch from a later version of b: %v %v, want b at the database's %d", st.Msg(), st.Err(), before[b])
	}
	callOK(t, adminB, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "after-the-restore"})
	if !st.Receive() || st.Msg().TenantId != b || st.Msg().Version != before[b]+1 {
		t.Fatalf("a check key's watch from a later version of b: %v %v, want b at %d", st.Msg(), st.Err(), before[b]+1)
	}
}

// Deciders pulling one version of a tenant are sent the snapshot the
// first pull read, the same as a read would give; a change is read again,
// once. The sources are counted in sluice_config_snapshots_sent_total.
func TestConfigServiceReadsASnapshotOncePerVersion(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, store := newServerWith(t, func(cfg *HandlerConfig) { cfg.Registerer = reg })
	c := newClients(srv)
	sent := func(source string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range mfs {
			for _, m := range f.GetMetric() {
				if f.GetName() == "sluice_config_snapshots_sent_total" && m.GetLabel()[0].GetValue() == source {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	a, adminA := setupTenant(t, c, "a")
	callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "pro"})
	pull := func(since map[string]int64) *sluicev1.Snapshot {
		t.Helper()
		snaps := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: since}).Snapshots
		if len(snaps) != 1 {
			t.Fatalf("snapshots %v, want a's", snaps)
		}
		return snaps[0]
	}
	first := pull(nil)
	if second := pull(nil); !proto.Equal(first, second) || sent("database") != 1 || sent("cache") != 1 {
		t.Fatalf("two pulls of one version: sent from the database %v, from the cache %v; equal %v", sent("database"), sent("cache"), proto.Equal(first, second))
	}
	snap, keys, err := store.Snapshot(context.Background(), a)
	if err != nil || !proto.Equal(first, protoconv.SnapshotToProto(snap, keys)) {
		t.Fatalf("the kept snapshot is not what a read gives: %v", err)
	}
	callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "enterprise"})
	for range 3 {
		if next := pull(map[string]int64{a: first.Version}); next.Version != first.Version+1 || len(next.Tiers) != len(first.Tiers)+1 {
			t.Fatalf("after a change: version %d with %d tiers, want %d with %d", next.Version, len(next.Tiers), first.Version+1, len(first.Tiers)+1)
		}
	}
	if sent("database") != 2 || sent("cache") != 3 {
		t.Fatalf("after a change pulled three times: sent from the database %v, from the cache %v; want 2 and 3", sent("database"), sent("cache"))
	}
}

// A decider holding the database's version of a tenant with another stamp
// holds a configuration the database lost and then moved on from (two
// changes lost to a restore, two others made since): it is sent the
// database's, whether it signs in as a decider or with the tenant's check
// key, and no version moves.
func TestConfigServiceResendsAVersionOfAnotherStamp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, _ := newServerWith(t, func(cfg *HandlerConfig) { cfg.Registerer = reg })
	c := newClients(srv)
	wentBack := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range mfs {
			if f.GetName() == "sluice_config_went_back_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no sluice_config_went_back_total")
		return 0
	}
	a, adminA := setupTenant(t, c, "a")
	ck := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK})
	snaps := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{}).Snapshots
	if len(snaps) != 1 || snaps[0].Stamp == 0 {
		t.Fatalf("snapshots: %v, want a's with a stamp", snaps)
	}
	v, stamp := snaps[0].Version, snaps[0].Stamp
	for _, key := range []string{deciderKey, ck.Secret} {
		for _, held := range []int64{stamp, 0} { // the database's, or none known
			got := callOK(t, key, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: v}, Stamps: map[string]int64{a: held}})
			if len(got.Snapshots) != 0 {
				t.Fatalf("a decider holding version %d with stamp %d is sent %v", v, held, got.Snapshots)
			}
		}
		before := wentBack()
		got := callOK(t, key, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: v}, Stamps: map[string]int64{a: stamp ^ 1}})
		if len(got.Snapshots) != 1 || got.Snapshots[0].Version != v || got.Snapshots[0].Stamp != stamp {
			t.Fatalf("a decider holding version %d with another stamp is sent %v, want the database's (stamp %d)", v, got.Snapshots, stamp)
		}
		if after := wentBack(); after != before+1 {
			t.Fatalf("sluice_config_went_back_total went from %v to %v, want one more", before, after)
		}
	}

	// Each change draws a new stamp.
	callOK(t, adminA, c.tiers.CreateTier, &sluicev1.CreateTierRequest{Name: "next"})
	next := callOK(t, deciderKey, c.config.GetSnapshots, &sluicev1.GetSnapshotsRequest{Since: map[string]int64{a: v}, Stamps: map[string]int64{a: stamp}}).Snapshots
	if len(next) != 1 || next[0].Version != v+1 || next[0].Stamp == stamp || next[0].Stamp == 0 {
		t.Fatalf("after a change: %v, want version %d with a new stamp (not %d)", next, v+1, stamp)
	}
}

// A request whose JSON holds a malformed value is refused with a field
// error naming it, as the domain's validation names fields, not with the
// decoder's message: the console shows it next to its input.
func TestMalformedJSONValueIsAFieldError(t *testing.T) {
	t.Parallel()
	srv, _ := newServerWith(t, func(*HandlerConfig) {})
	c := newClients(srv)
	_, admin := setupTenant(t, c, "acme")
	body := `{"tierId":"x","rule":{"name":"r","params":{"algorithm":"ALGORITHM_FIXED_WINDOW","limit":"5","window":"abc"}}}`
	req, _ := http.NewRequest("POST", srv.URL+"/sluice.v1.RuleService/CreateRule", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Code    string
		Message string
		Details []struct {
			Debug struct {
				FieldViolations []struct{ Field, Description string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Code != "invalid_argument" || len(out.Details) != 1 || len(out.Details[0].Debug.FieldViolations) != 1 ||
		out.Details[0].Debug.FieldViolations[0].Field != "window" || strings.Contains(out.Message, "unmarshal") {
		t.Fatalf("a malformed window: %d %+v", resp.StatusCode, out)
	}
	// Without a key, nothing is said of the body's shape.
	req, _ = http.NewRequest("POST", srv.URL+"/sluice.v1.RuleService/CreateRule", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
