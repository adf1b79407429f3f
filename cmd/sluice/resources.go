package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// errRejected marks a check that was rejected (exit code 4).
var errRejected = errors.New("rejected")

// session is what every resource command shares: the control plane, the
// key, the output form and the tenant acted in.
type session struct {
	ctx    context.Context
	server string
	key    string
	tenant string
	json   bool
	out    io.Writer
}

// call makes one authenticated call and prints its answer: JSON with
// -json, else human through text.
func call[Req, Res any](s *session, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, text func(*tabwriter.Writer, *Res)) error {
	_, err := callFor(s, f, msg, text)
	return err
}

// callFor is call that also returns the answer.
func callFor[Req, Res any](s *session, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, text func(*tabwriter.Writer, *Res)) (*Res, error) {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := f(s.ctx, req)
	if err != nil {
		return nil, err
	}
	if s.json {
		b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(any(res.Msg).(proto.Message))
		_, err := fmt.Fprintln(s.out, string(b))
		return res.Msg, err
	}
	tw := tabwriter.NewWriter(s.out, 2, 4, 2, ' ', 0)
	text(tw, res.Msg)
	return res.Msg, tw.Flush()
}

// resourceUsage lists the resource commands.
const resourceUsage = `usage:
  sluice tenants   list | get ID | create -slug S -name N [-default-tier T] | delete ID
  sluice tiers     list | create NAME | delete ID
  sluice rules     list [-tier ID] | create -tier ID -name N -algorithm A -limit N -window D [flags] | delete ID
  sluice overrides list | create -identifier ID (-tier T | -rule ID -limit N -window D | -block [-rule ID]) [-for D] | delete ID
  sluice keys      list | create -kind admin|check [-name N] | revoke ID
  sluice check     [-decider URL] [-tier T] [-cost N] [-peek] KEY=VALUE...   (SLUICE_CHECK_KEY: a check key)
  sluice reset     [-decider URL] [-tier T] KEY=VALUE...                     (SLUICE_CHECK_KEY: a check key)
common flags: -server URL (SLUICE_SERVER), -tenant ID (with the operator key), -json
`

// runResource runs `sluice <resource> <verb> ...`.
func runResource(ctx context.Context, resource string, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	switch resource {
	case "check":
		return runCheck(ctx, args, stdout, stderr, getenv)
	case "reset":
		return runReset(ctx, args, stdout, stderr, getenv)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, resourceUsage)
		return errUsage
	}
	verb := args[0]
	fs := flag.NewFlagSet("sluice "+resource+" "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := &session{ctx: ctx, out: stdout, key: getenv("SLUICE_KEY")}
	fs.StringVar(&s.server, "server", flagenv.Env(getenv).String("SLUICE_SERVER", "http://127.0.0.1:8081"), "control plane URL (env SLUICE_SERVER)")
	fs.StringVar(&s.tenant, "tenant", "", "tenant id (required with the operator key)")
	fs.BoolVar(&s.json, "json", false, "print JSON")
	// Flags of the create verbs.
	slug, name, defTier := fs.String("slug", "", "tenant slug"), fs.String("name", "", "name"), fs.String("default-tier", "", "tenant's default tier")
	tier, algorithm := fs.String("tier", "", "tier id (rules), tier name (overrides)"), fs.String("algorithm", "token_bucket", "rule algorithm")
	limit, burst := fs.Int64("limit", 0, "requests per window"), fs.Int64("burst", 0, "token bucket / GCRA capacity")
	window := fs.Duration("window", 0, "window, e.g. 1m")
	keyBy, match := fs.String("key-by", "client_id", "comma-separated descriptors keying the counter"), fs.String("match", "", "comma-separated key=value descriptors a request must carry")
	shadow, disabled := fs.Bool("shadow", false, "rule, or tenant: report, never reject"), fs.Bool("disabled", false, "create disabled")
	exact := fs.Bool("exact", false, "envoyproxy/ratelimit's lookup: only requests with exactly the -match keys; the most specific exact rule wins")
	block := fs.Bool("block", false, "rule: reject every request it applies to, counting nothing (a blocklist entry); override: block the client (with -rule, on that rule only)")
	replaces := fs.String("replaces", "", "rule: comma-separated names of rules this one replaces where it applies")
	lasts := fs.Duration("for", 0, "override or key: expires after this long, e.g. 24h or 720h (0: never)")
	syncEvery := fs.Duration("sync", 0, "count the rule on each decider, reconciling with Redis this often (e.g. 100ms; 0: strict)")
	identifier, ruleID, kind := fs.String("identifier", "", "override: client id, or a prefix ending in *"), fs.String("rule", "", "override: rule id"), fs.String("kind", "check", "key kind: admin or check")
	if err := fs.Parse(args[1:]); err != nil {
		return errUsage
	}
	if s.key == "" {
		fmt.Fprint(stderr, "set SLUICE_KEY to the operator key or a tenant admin key\n")
		return errUsage
	}
	arg := func() (string, error) {
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "usage: sluice %s %s [flags] ID\n", resource, verb)
			return "", errUsage
		}
		return fs.Arg(0), nil
	}
	c := http.DefaultClient
	switch resource + " " + verb {
	case "tenants list":
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).ListTenants, &sluicev1.ListTenantsRequest{}, func(w *tabwriter.Writer, r *sluicev1.ListTenantsResponse) {
			fmt.Fprintln(w, "ID\tSLUG\tNAME\tDEFAULT TIER\tSTATUS\tSHADOW")
			for _, t := range r.Tenants {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\n", t.Id, t.Slug, t.Name, t.DefaultTier, strings.TrimPrefix(t.Status.String(), "TENANT_STATUS_"), t.Shadow)
			}
		})
	case "tenants get":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).GetTenant, &sluicev1.GetTenantRequest{TenantId: id}, func(w *tabwriter.Writer, r *sluicev1.GetTenantResponse) {
			fmt.Fprintf(w, "id\t%s\nslug\t%s\nname\t%s\ndefault tier\t%s\nshadow\t%v\nconfig version\t%d\n", r.Tenant.Id, r.Tenant.Slug, r.Tenant.Name, r.Tenant.DefaultTier, r.Tenant.Shadow, r.Tenant.ConfigVersion)
		})
	case "tenants create":
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: *slug, Name: *name, DefaultTier: *defTier, Shadow: *shadow}}, func(w *tabwriter.Writer, r *sluicev1.CreateTenantResponse) {
			fmt.Fprintf(w, "created tenant %s (%s)\n", r.Tenant.Slug, r.Tenant.Id)
		})
	case "tenants delete":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: id}, func(w *tabwriter.Writer, _ *sluicev1.DeleteTenantResponse) {
			fmt.Fprintf(w, "deleted tenant %s\n", id)
		})
	case "tiers list":
		return call(s, sluicev1connect.NewTierServiceClient(c, s.server).ListTiers, &sluicev1.ListTiersRequest{TenantId: s.tenant}, func(w *tabwriter.Writer, r *sluicev1.ListTiersResponse) {
			fmt.Fprintln(w, "ID\tNAME\tRULES")
			for _, t := range r.Tiers {
				fmt.Fprintf(w, "%s\t%s\t%d\n", t.Id, t.Name, len(t.Rules))
			}
		})
	case "tiers create":
		n, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewTierServiceClient(c, s.server).CreateTier, &sluicev1.CreateTierRequest{TenantId: s.tenant, Name: n}, func(w *tabwriter.Writer, r *sluicev1.CreateTierResponse) {
			fmt.Fprintf(w, "created tier %s (%s), config version %d\n", r.Tier.Name, r.Tier.Id, r.ConfigVersion)
		})
	case "tiers delete":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewTierServiceClient(c, s.server).DeleteTier, &sluicev1.DeleteTierRequest{TenantId: s.tenant, TierId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteTierResponse) {
			fmt.Fprintf(w, "deleted tier %s, config version %d\n", id, r.ConfigVersion)
		})
	case "rules list":
		list := sluicev1connect.NewRuleServiceClient(c, s.server).ListRules
		if *tier == "" {
			list = everyTiersRules(sluicev1connect.NewTierServiceClient(c, s.server))
		}
		return call(s, list, &sluicev1.ListRulesRequest{TenantId: s.tenant, TierId: *tier}, func(w *tabwriter.Writer, r *sluicev1.ListRulesResponse) {
			fmt.Fprintln(w, "ID\tNAME\tALGORITHM\tLIMIT\tWINDOW\tKEY BY\tMATCH\tFLAGS")
			for _, x := range r.Rules {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", x.Id, x.Name, algorithmName(x.Params.GetAlgorithm()), x.Params.GetLimit(),
					x.Params.GetWindow().AsDuration(), strings.Join(x.KeyBy, ","), matchText(x.Match), ruleFlags(x))
			}
		})
	case "rules create":
		alg, ok := sluicev1.Algorithm_value["ALGORITHM_"+strings.ToUpper(*algorithm)]
		if !ok {
			fmt.Fprintf(stderr, "unknown algorithm %q: token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, sliding_buckets or concurrency\n", *algorithm)
			return errUsage
		}
		m, err := parsePairs(*match)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return errUsage
		}
		rule := &sluicev1.Rule{Name: *name, KeyBy: flagenv.List(*keyBy), Shadow: *shadow, Exact: *exact, Block: *block, Replaces: flagenv.List(*replaces), Enabled: !*disabled, Match: m,
			Params: &sluicev1.LimitParams{Algorithm: sluicev1.Algorithm(alg), Limit: *limit, Burst: *burst, Window: durationpb.New(*window)}}
		if *syncEvery != 0 {
			rule.Sync = durationpb.New(*syncEvery)
		}
		return call(s, sluicev1connect.NewRuleServiceClient(c, s.server).CreateRule, &sluicev1.CreateRuleRequest{TenantId: s.tenant, TierId: *tier, Rule: rule}, func(w *tabwriter.Writer, r *sluicev1.CreateRuleResponse) {
			fmt.Fprintf(w, "created rule %s (%s), config version %d\n", r.Rule.Name, r.Rule.Id, r.ConfigVersion)
		})
	case "rules delete":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewRuleServiceClient(c, s.server).DeleteRule, &sluicev1.DeleteRuleRequest{TenantId: s.tenant, RuleId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteRuleResponse) {
			fmt.Fprintf(w, "deleted rule %s, config version %d\n", id, r.ConfigVersion)
		})
	case "overrides list":
		return call(s, sluicev1connect.NewOverrideServiceClient(c, s.server).ListOverrides, &sluicev1.ListOverridesRequest{TenantId: s.tenant}, func(w *tabwriter.Writer, r *sluicev1.ListOverridesResponse) {
			fmt.Fprintln(w, "ID\tIDENTIFIER\tTIER\tRULE\tLIMIT\tWINDOW\tBLOCK\tEXPIRES")
			for _, o := range r.Overrides {
				expires := "never"
				if o.ExpiresAt != nil {
					expires = o.ExpiresAt.AsTime().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%v\t%s\n", o.Id, o.Identifier, o.Tier, o.RuleId, o.Params.GetLimit(), o.Params.GetWindow().AsDuration(), o.Block, expires)
			}
		})
	case "overrides create":
		o := &sluicev1.Override{Identifier: *identifier, Tier: *tier, RuleId: *ruleID, Block: *block}
		if *lasts > 0 {
			o.ExpiresAt = timestamppb.New(time.Now().Add(*lasts))
		}
		if *ruleID != "" && !*block {
			o.Params = &sluicev1.LimitParams{Algorithm: sluicev1.Algorithm(sluicev1.Algorithm_value["ALGORITHM_"+strings.ToUpper(*algorithm)]),
				Limit: *limit, Burst: *burst, Window: durationpb.New(*window)}
		}
		return call(s, sluicev1connect.NewOverrideServiceClient(c, s.server).CreateOverride, &sluicev1.CreateOverrideRequest{TenantId: s.tenant, Override: o}, func(w *tabwriter.Writer, r *sluicev1.CreateOverrideResponse) {
			fmt.Fprintf(w, "created override %s for %s, config version %d\n", r.Override.Id, r.Override.Identifier, r.ConfigVersion)
		})
	case "overrides delete":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewOverrideServiceClient(c, s.server).DeleteOverride, &sluicev1.DeleteOverrideRequest{TenantId: s.tenant, OverrideId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteOverrideResponse) {
			fmt.Fprintf(w, "deleted override %s, config version %d\n", id, r.ConfigVersion)
		})
	case "keys list":
		return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).ListKeys, &sluicev1.ListKeysRequest{TenantId: s.tenant}, func(w *tabwriter.Writer, r *sluicev1.ListKeysResponse) {
			fmt.Fprintln(w, "ID\tKIND\tNAME\tPREFIX\tLAST USED\tREVOKED\tEXPIRES")
			for _, k := range r.Keys {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Id, strings.ToLower(strings.TrimPrefix(k.Kind.String(), "KEY_KIND_")), k.Name, k.Prefix,
					when(k.LastUsedAt.IsValid(), k.LastUsedAt.AsTime()), when(k.RevokedAt.IsValid(), k.RevokedAt.AsTime()), when(k.ExpiresAt.IsValid(), k.ExpiresAt.AsTime()))
			}
		})
	case "keys create":
		kv, ok := sluicev1.KeyKind_value["KEY_KIND_"+strings.ToUpper(*kind)]
		if !ok {
			fmt.Fprintf(stderr, "unknown key kind %q: admin or check\n", *kind)
			return errUsage
		}
		req := &sluicev1.CreateKeyRequest{TenantId: s.tenant, Kind: sluicev1.KeyKind(kv), Name: *name}
		if *lasts > 0 {
			req.ExpiresAt = timestamppb.New(time.Now().Add(*lasts))
		}
		return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).CreateKey, req, func(w *tabwriter.Writer, r *sluicev1.CreateKeyResponse) {
			fmt.Fprintf(w, "created %s key %s\nsecret\t%s\t(shown once: store it now)\n", *kind, r.Key.Id, r.Secret)
			if r.Key.ExpiresAt.IsValid() {
				fmt.Fprintf(w, "expires\t%s\n", r.Key.ExpiresAt.AsTime().Format(time.RFC3339))
			}
		})
	case "keys revoke":
		id, err := arg()
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).RevokeKey, &sluicev1.RevokeKeyRequest{TenantId: s.tenant, KeyId: id}, func(w *tabwriter.Writer, _ *sluicev1.RevokeKeyResponse) {
			fmt.Fprintf(w, "revoked key %s\n", id)
		})
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", resource+" "+verb, resourceUsage)
	return errUsage
}

// runCheck asks a decider for a decision: exit 0 when allowed, 4 when
// rejected.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	var cost *int64
	var peek *bool
	dc, err := parseDeciderCall(ctx, "check", "[-cost N] [-peek] ", args, stdout, stderr, getenv, func(fs *flag.FlagSet) {
		cost = fs.Int64("cost", 0, "cost units (default 1)")
		peek = fs.Bool("peek", false, "ask without consuming whether the request would be admitted")
	})
	if err != nil {
		return err
	}
	req := &sluicev1.CheckRequest{Tier: dc.tier, Cost: *cost, Peek: *peek, Descriptors: dc.descriptors}
	res, err := callFor(dc.session, dc.client.Check, req, func(w *tabwriter.Writer, r *sluicev1.CheckResponse) {
		fmt.Fprintf(w, "%s\t(config version %d)\n", map[bool]string{true: "allowed", false: "rejected"}[r.Allowed], r.ConfigVersion)
		fmt.Fprintln(w, "RULE\tALLOWED\tLIMIT\tREMAINING\tRESET\tRETRY AFTER")
		for _, x := range r.Rules {
			fmt.Fprintf(w, "%s\t%v\t%d\t%d\t%s\t%s\n", x.GetRuleName(), x.GetAllowed(), x.GetLimit(), x.GetRemaining(), x.GetResetAfter().AsDuration(), x.GetRetryAfter().AsDuration())
		}
	})
	if err != nil {
		return err
	}
	if !res.Allowed {
		return errRejected
	}
	return nil
}

// runReset runs `sluice reset`: the counters the request of the
// descriptors given meets are reset on every decider.
func runReset(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	dc, err := parseDeciderCall(ctx, "reset", "", args, stdout, stderr, getenv, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	_, err = callFor(dc.session, dc.client.Reset, &sluicev1.ResetRequest{Tier: dc.tier, Descriptors: dc.descriptors},
		func(w *tabwriter.Writer, r *sluicev1.ResetResponse) {
			if len(r.Rules) == 0 {
				fmt.Fprintln(w, "no rule applies: nothing to reset")
			}
			for _, x := range r.Rules {
				fmt.Fprintf(w, "reset %s\t(%s)\n", x.RuleName, x.RuleId)
			}
		})
	return err
}

// deciderCall is what the commands asking a decider share: the session
// (the check key), the decider's client, and the request's tier and
// KEY=VALUE descriptors.
type deciderCall struct {
	session     *session
	client      sluicev1connect.DecisionServiceClient
	tier        string
	descriptors []*sluicev1.Descriptor
}

// parseDeciderCall parses `sluice <name>`'s arguments: the flags every
// such command has, those more adds (shown in usage as moreUsage), and
// the descriptors.
func parseDeciderCall(ctx context.Context, name, moreUsage string, args []string, stdout, stderr io.Writer, getenv func(string) string, more func(*flag.FlagSet)) (*deciderCall, error) {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	decider := fs.String("decider", flagenv.Env(getenv).String("SLUICE_DECIDER", "http://127.0.0.1:8080"), "decider URL (env SLUICE_DECIDER)")
	tier := fs.String("tier", "", "tier to apply")
	asJSON := fs.Bool("json", false, "print JSON")
	more(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fmt.Fprintf(stderr, "usage: sluice %s [-decider URL] [-tier T] %s[-json] KEY=VALUE...\n", name, moreUsage)
		return nil, errUsage
	}
	key := getenv("SLUICE_CHECK_KEY")
	if key == "" {
		fmt.Fprint(stderr, "set SLUICE_CHECK_KEY to a check key\n")
		return nil, errUsage
	}
	dc := &deciderCall{session: &session{ctx: ctx, key: key, json: *asJSON, out: stdout},
		client: sluicev1connect.NewDecisionServiceClient(http.DefaultClient, *decider), tier: *tier}
	for _, a := range fs.Args() {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "descriptor %q: want KEY=VALUE\n", a)
			return nil, errUsage
		}
		dc.descriptors = append(dc.descriptors, &sluicev1.Descriptor{Key: k, Value: v})
	}
	return dc, nil
}

func algorithmName(a sluicev1.Algorithm) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "ALGORITHM_"))
}

// everyTiersRules lists the rules of all the tenant's tiers, in the tiers'
// order, for "rules list" without -tier.
func everyTiersRules(tiers sluicev1connect.TierServiceClient) func(context.Context, *connect.Request[sluicev1.ListRulesRequest]) (*connect.Response[sluicev1.ListRulesResponse], error) {
	return func(ctx context.Context, req *connect.Request[sluicev1.ListRulesRequest]) (*connect.Response[sluicev1.ListRulesResponse], error) {
		treq := connect.NewRequest(&sluicev1.ListTiersRequest{TenantId: req.Msg.TenantId})
		treq.Header().Set("Authorization", req.Header().Get("Authorization"))
		res, err := tiers.ListTiers(ctx, treq)
		if err != nil {
			return nil, err
		}
		out := &sluicev1.ListRulesResponse{}
		for _, t := range res.Msg.Tiers {
			out.Rules = append(out.Rules, t.Rules...)
		}
		return connect.NewResponse(out), nil
	}
}

func matchText(m []*sluicev1.Match) string {
	var parts []string
	for _, x := range m {
		parts = append(parts, x.Key+"="+x.Value)
	}
	return strings.Join(parts, ",")
}

func ruleFlags(r *sluicev1.Rule) string {
	var f []string
	if !r.Enabled {
		f = append(f, "disabled")
	}
	if r.Shadow {
		f = append(f, "shadow")
	}
	if r.Exact {
		f = append(f, "exact")
	}
	if r.Block {
		f = append(f, "block")
	}
	if len(r.Replaces) > 0 {
		f = append(f, "replaces "+strings.Join(r.Replaces, "+"))
	}
	if r.Sync != nil {
		f = append(f, "sync "+r.Sync.AsDuration().String())
	}
	return strings.Join(f, ",")
}

func parsePairs(s string) ([]*sluicev1.Match, error) {
	var out []*sluicev1.Match
	for _, p := range flagenv.List(s) {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("match %q: want KEY=VALUE", p)
		}
		out = append(out, &sluicev1.Match{Key: k, Value: v})
	}
	return out, nil
}

func when(ok bool, t time.Time) string {
	if !ok {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// describe renders a failed call for people: what the command was doing
// (the wrapping of the call's error), the call's message, and each field
// of an InvalidArgument's BadRequest details.
func describe(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(err.Error(), ce.Error()))
	b.WriteString(strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + ce.Message())
	for _, d := range ce.Details() {
		v, err := d.Value()
		if br, ok := v.(*errdetails.BadRequest); ok && err == nil {
			for _, f := range br.FieldViolations {
				b.WriteString("\n  " + f.Field + ": " + f.Description)
			}
		}
	}
	return b.String()
}
