package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
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
  sluice tenants   list [-slug PREFIX] | get TENANT | create SLUG -name N [-default-tier T] [-shadow] | update TENANT [flags] | delete TENANT
  sluice tiers     list | create NAME | rename TIER -name N | delete TIER
  sluice rules     list [-tier T] | create -tier T -name N [-algorithm A] -limit N -window D [flags] | update RULE [flags] | delete RULE
  sluice overrides list [-identifier PREFIX] | create -identifier ID [-descriptor D] (-tier T | -rule R [-limit N] [-window D] [flags] | -block [-rule R]) [-for D] | update ID [flags] | delete ID
  sluice keys      list [-revoked] | create [-kind admin|viewer|check] [-name N] [-for D] | rotate [-grace D] ID | revoke ID
  sluice audit     list [-limit N] [-before ID] [-resource ID]   (who changed what, newest first)
  sluice deciders  list                                 (operator: the config version each decider enforces, and the latest)
  sluice reports   rejections [-step D] [-rule R] [-tier T] | top [-rule R] [-limit N] | breakdown [-by rule|tier] | csv REPORT
                   (each over -since D, 24h unless given, before -until T, now unless given; a viewer key is enough)
  sluice check     [-decider URL] [-tier T] [-cost N] [-peek] KEY=VALUE...   (SLUICE_CHECK_KEY: a check key)
  sluice reset     [-decider URL] [-tier T] KEY=VALUE...                     (SLUICE_CHECK_KEY: a check key)
common flags: -server URL (SLUICE_SERVER), -tenant ID|SLUG (with the operator key), -json
a tier (-tier) is given by name or id, a rule (-rule) by id, TIER/RULE, or its name where one tier has it; "sluice RESOURCE VERB -h" lists a command's flags
`

// verb is one resource command: the argument it takes after its flags
// ("" for none, else its name for the usage line) and its flags, defined
// on the command's own flag set so that its -h lists them alone and a
// flag of another command is refused. flags returns what runs once they
// are parsed, given the session, the client and the argument.
type verb struct {
	arg   string
	flags func(fs *flag.FlagSet) func(s *session, c *http.Client, arg string) error
}

// plain is a verb without flags of its own.
func plain(arg string, run func(s *session, c *http.Client, arg string) error) verb {
	return verb{arg, func(*flag.FlagSet) func(*session, *http.Client, string) error { return run }}
}

// verbNotes say more in a command's usage, where there is more to say.
var verbNotes = map[string]string{
	"tenants update":   "It changes what the flags given say and keeps the rest, as it finds them when it writes.",
	"rules update":     "It changes what the flags given say and keeps the rest, as it finds them when it writes\n(the defaults below are create's).",
	"overrides update": "It changes what the flags given say and keeps the rest, as it finds them when it writes,\nin one config version: the client is never without its override meanwhile. Parameters without\n-algorithm change the override's own (a burst following -limit unless -burst is given); with it,\nthe flags given are the parameters, whole.",
	"keys rotate":      "It makes a new key of the key's kind, name and expiry and prints its secret; the old key\nworks on through -grace (never past its own expiry), so its users can move to the new one.",
	"overrides create": "With -rule, parameters without -algorithm change the rule's (a burst following -limit\nunless -burst is given); with it, the flags given are the parameters, whole.",
}

// updated says what an update did to a resource read as before, written as
// after: "unchanged" when the flags left it as it was (the control plane
// then writes nothing), else "updated".
func updated(before, after proto.Message) string {
	if proto.Equal(before, after) {
		return "unchanged"
	}
	return "updated"
}

// edit runs a read-modify-write whose write carries the etag of its read,
// again while the write is refused because another change came between
// (Aborted), so that the change is applied to the latest state and overwrites
// none. It gives up after a few rounds of such contention.
func edit(readModifyWrite func() error) error {
	const rounds = 5
	var err error
	for range rounds {
		if err = readModifyWrite(); connect.CodeOf(err) != connect.CodeAborted {
			return err
		}
	}
	return fmt.Errorf("changed by others %d times while this change was being made; try again: %w", rounds, err)
}

// verbs are the resource commands, by "resource verb".
var verbs = map[string]verb{
	"tenants list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		prefix := fs.String("slug", "", "only tenants whose slug starts with this")
		return func(s *session, c *http.Client, _ string) error {
			req := &sluicev1.ListTenantsRequest{SlugPrefix: *prefix, PageSize: 1000}
			return call(s, allTenants(sluicev1connect.NewTenantServiceClient(c, s.server).ListTenants), req, func(w *tabwriter.Writer, r *sluicev1.ListTenantsResponse) {
				fmt.Fprintln(w, "ID\tSLUG\tNAME\tDEFAULT TIER\tSTATUS\tSHADOW\tVERSION")
				for _, t := range r.Tenants {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\t%d\n", t.Id, t.Slug, t.Name, t.DefaultTier, tenantStatus(t), t.Shadow, t.ConfigVersion)
				}
			})
		}
	}},
	"tenants get": plain("TENANT", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).GetTenant, &sluicev1.GetTenantRequest{TenantId: id}, func(w *tabwriter.Writer, r *sluicev1.GetTenantResponse) {
			fmt.Fprintf(w, "id\t%s\nslug\t%s\nname\t%s\ndefault tier\t%s\nstatus\t%s\nshadow\t%v\nconfig version\t%d\n", r.Tenant.Id, r.Tenant.Slug, r.Tenant.Name, r.Tenant.DefaultTier, tenantStatus(r.Tenant), r.Tenant.Shadow, r.Tenant.ConfigVersion)
		})
	}),
	"tenants create": {"[SLUG]", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		slug, name, defTier := fs.String("slug", "", "tenant slug, its Envoy domain (or as the argument)"), fs.String("name", "", "name"), fs.String("default-tier", "", "tenant's default tier")
		shadow := fs.Bool("shadow", false, "shadow mode: the tenant's rules report, never reject")
		return func(s *session, c *http.Client, arg string) error {
			switch {
			case arg != "" && *slug != "" && arg != *slug:
				return usageErrorf("two slugs: %q and -slug %q", arg, *slug)
			case arg != "":
				*slug = arg
			}
			return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: *slug, Name: *name, DefaultTier: *defTier, Shadow: *shadow}}, func(w *tabwriter.Writer, r *sluicev1.CreateTenantResponse) {
				fmt.Fprintf(w, "created tenant %s (%s)\n", r.Tenant.Slug, r.Tenant.Id)
			})
		}
	}},
	"tenants update": {"TENANT", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		name, defTier := fs.String("name", "", "name"), fs.String("default-tier", "", "tenant's default tier")
		shadow := fs.Bool("shadow", false, "shadow mode: the tenant's rules report, never reject")
		fs.String("status", "active", "active, or suspended: every check of the tenant refused")
		return func(s *session, c *http.Client, id string) error {
			return edit(func() error {
				tenants := sluicev1connect.NewTenantServiceClient(c, s.server)
				req := connect.NewRequest(&sluicev1.GetTenantRequest{TenantId: id})
				req.Header().Set("Authorization", "Bearer "+s.key)
				res, err := tenants.GetTenant(s.ctx, req)
				if err != nil {
					return err
				}
				t := res.Msg.Tenant
				before := proto.Clone(t)
				fs.Visit(func(fl *flag.Flag) {
					switch fl.Name {
					case "name":
						t.Name = *name
					case "default-tier":
						t.DefaultTier = *defTier
					case "shadow":
						t.Shadow = *shadow
					case "status":
						var v int32
						v, err = enumFlag(sluicev1.TenantStatus_value, "TENANT_STATUS_", fl)
						t.Status = sluicev1.TenantStatus(v)
					}
				})
				if err != nil {
					return err
				}
				return call(s, tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: t}, func(w *tabwriter.Writer, r *sluicev1.UpdateTenantResponse) {
					fmt.Fprintf(w, "%s tenant %s (%s), config version %d\n", updated(before, t), t.Slug, t.Id, r.ConfigVersion)
				})
			})
		}
	}},
	"tenants delete": plain("TENANT", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: id}, func(w *tabwriter.Writer, _ *sluicev1.DeleteTenantResponse) {
			fmt.Fprintf(w, "deleted tenant %s\n", id)
		})
	}),
	"tiers list": plain("", func(s *session, c *http.Client, _ string) error {
		return call(s, sluicev1connect.NewTierServiceClient(c, s.server).ListTiers, &sluicev1.ListTiersRequest{TenantId: s.tenant}, func(w *tabwriter.Writer, r *sluicev1.ListTiersResponse) {
			fmt.Fprintln(w, "ID\tNAME\tRULES")
			for _, t := range r.Tiers {
				fmt.Fprintf(w, "%s\t%s\t%d\n", t.Id, t.Name, len(t.Rules))
			}
		})
	}),
	"tiers create": {"[NAME]", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		name := fs.String("name", "", "the tier's name (or as the argument, as rules and tenants take -name)")
		return func(s *session, c *http.Client, n string) error {
			switch {
			case n != "" && *name != "" && n != *name:
				return usageErrorf("two names: %q and -name %q", n, *name)
			case n == "":
				n = *name
			}
			if n == "" {
				return usageErrorf("the tier's name: sluice tiers create NAME")
			}
			return call(s, sluicev1connect.NewTierServiceClient(c, s.server).CreateTier, &sluicev1.CreateTierRequest{TenantId: s.tenant, Name: n}, func(w *tabwriter.Writer, r *sluicev1.CreateTierResponse) {
				fmt.Fprintf(w, "created tier %s (%s), config version %d\n", r.Tier.Name, r.Tier.Id, r.ConfigVersion)
			})
		}
	}},
	"tiers rename": {"TIER", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		name := fs.String("name", "", "the tier's new name (its overrides and the tenant's default follow)")
		return func(s *session, c *http.Client, tier string) error {
			if *name == "" {
				return usageErrorf("-name: the tier's new name")
			}
			tiers := sluicev1connect.NewTierServiceClient(c, s.server)
			id, err := tierIDOf(s, tiers, tier)
			if err != nil {
				return err
			}
			return call(s, tiers.RenameTier, &sluicev1.RenameTierRequest{TenantId: s.tenant, TierId: id, Name: *name}, func(w *tabwriter.Writer, r *sluicev1.RenameTierResponse) {
				fmt.Fprintf(w, "renamed tier %s to %s, config version %d\n", tier, *name, r.ConfigVersion)
			})
		}
	}},
	"tiers delete": plain("TIER", func(s *session, c *http.Client, tier string) error {
		tiers := sluicev1connect.NewTierServiceClient(c, s.server)
		id, err := tierIDOf(s, tiers, tier)
		if err != nil {
			return err
		}
		return call(s, tiers.DeleteTier, &sluicev1.DeleteTierRequest{TenantId: s.tenant, TierId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteTierResponse) {
			fmt.Fprintf(w, "deleted tier %s, config version %d\n", tier, r.ConfigVersion)
		})
	}),
	"rules list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		tier := fs.String("tier", "", "only this tier's rules (name or id)")
		return func(s *session, c *http.Client, _ string) error {
			var tiers []string
			return call(s, tiersRules(sluicev1connect.NewTierServiceClient(c, s.server), *tier, &tiers), &sluicev1.ListTiersRequest{TenantId: s.tenant}, func(w *tabwriter.Writer, r *sluicev1.ListRulesResponse) {
				fmt.Fprintln(w, "ID\tTIER\tNAME\tALGORITHM\tLIMIT\tWINDOW\tKEY BY\tMATCH\tFLAGS")
				for i, x := range r.Rules {
					alg, lim, win := algorithmName(x.Params.GetAlgorithm()), strconv.FormatInt(x.Params.GetLimit(), 10), windowText(x.Params)
					if x.Block { // it counts nothing: its parameters mean nothing
						alg, lim, win = "block", "-", "-"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Id, tiers[i], x.Name, alg, lim,
						win, strings.Join(x.KeyBy, ","), matchText(x.Match), ruleFlags(x))
				}
			})
		}
	}},
	"rules create": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		tier := fs.String("tier", "", "the rule's tier (name or id)")
		rf := defineRuleOpts(fs)
		return func(s *session, c *http.Client, _ string) error {
			tierID, err := tierIDOf(s, sluicev1connect.NewTierServiceClient(c, s.server), *tier)
			if err != nil {
				return err
			}
			rule := &sluicev1.Rule{Enabled: true, KeyBy: []string{"client_id"}, Params: &sluicev1.LimitParams{Algorithm: sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET}}
			if err := rf.apply(fs, rule); err != nil {
				return err
			}
			return call(s, sluicev1connect.NewRuleServiceClient(c, s.server).CreateRule, &sluicev1.CreateRuleRequest{TenantId: s.tenant, TierId: tierID, Rule: rule}, func(w *tabwriter.Writer, r *sluicev1.CreateRuleResponse) {
				fmt.Fprintf(w, "created rule %s (%s), config version %d\n", r.Rule.Name, r.Rule.Id, r.ConfigVersion)
			})
		}
	}},
	"rules update": {"RULE", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		rf := defineRuleOpts(fs)
		return func(s *session, c *http.Client, ref string) error {
			id, err := ruleRef(s, c, ref)
			if err != nil {
				return err
			}
			return edit(func() error {
				rule, err := ruleByID(s, sluicev1connect.NewTierServiceClient(c, s.server), id)
				if err != nil {
					return err
				}
				before := proto.Clone(rule)
				if err := rf.apply(fs, rule); err != nil {
					return err
				}
				return call(s, sluicev1connect.NewRuleServiceClient(c, s.server).UpdateRule, &sluicev1.UpdateRuleRequest{TenantId: s.tenant, Rule: rule}, func(w *tabwriter.Writer, r *sluicev1.UpdateRuleResponse) {
					fmt.Fprintf(w, "%s rule %s (%s), config version %d\n", updated(before, rule), rule.Name, rule.Id, r.ConfigVersion)
				})
			})
		}
	}},
	"rules delete": plain("RULE", func(s *session, c *http.Client, ref string) error {
		id, err := ruleRef(s, c, ref)
		if err != nil {
			return err
		}
		return call(s, sluicev1connect.NewRuleServiceClient(c, s.server).DeleteRule, &sluicev1.DeleteRuleRequest{TenantId: s.tenant, RuleId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteRuleResponse) {
			fmt.Fprintf(w, "deleted rule %s, config version %d\n", ref, r.ConfigVersion)
		})
	}),
	"overrides list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		prefix := fs.String("identifier", "", "only overrides whose identifier starts with this")
		return func(s *session, c *http.Client, _ string) error {
			req := &sluicev1.ListOverridesRequest{TenantId: s.tenant, IdentifierPrefix: *prefix, PageSize: 1000}
			return call(s, allOverrides(sluicev1connect.NewOverrideServiceClient(c, s.server)), req, func(w *tabwriter.Writer, r *sluicev1.ListOverridesResponse) {
				fmt.Fprintln(w, "ID\tIDENTIFIER\tTIER\tRULE\tLIMIT\tWINDOW\tBLOCK\tEXPIRES")
				names := ruleNames(s, sluicev1connect.NewTierServiceClient(c, s.server))
				for _, o := range r.Overrides {
					limit, window := "-", "-" // a move to a tier, or a block: no limit of its own
					if o.Params != nil {
						limit, window = strconv.FormatInt(o.Params.GetLimit(), 10), windowText(o.Params)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", o.Id, whom(o), cmp.Or(o.Tier, "-"), cmp.Or(names[o.RuleId], o.RuleId, "-"), limit, window, o.Block, expiry(o.ExpiresAt))
				}
			})
		}
	}},
	"overrides create": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		of := defineOverrideOpts(fs)
		identifier, tier, ruleID, block, lasts, pf := of.identifier, of.tier, of.ruleID, of.block, of.lasts, of.params
		return func(s *session, c *http.Client, _ string) error {
			if err := of.resolveRule(s, c); err != nil {
				return err
			}
			o := &sluicev1.Override{DescriptorKey: *of.descriptor, Identifier: *identifier, Tier: *tier, RuleId: *ruleID, Block: *block}
			if *lasts > 0 {
				o.ExpiresAt = timestamppb.New(time.Now().Add(*lasts))
			}
			if *ruleID != "" && !*block {
				var err error
				if o.Params, err = overrideParams(fs, pf); err != nil {
					return err
				}
			}
			ovs := sluicev1connect.NewOverrideServiceClient(c, s.server)
			err := call(s, ovs.CreateOverride, &sluicev1.CreateOverrideRequest{TenantId: s.tenant, Override: o}, func(w *tabwriter.Writer, r *sluicev1.CreateOverrideResponse) {
				fmt.Fprintf(w, "created override %s for %s, config version %d\n", r.Override.Id, r.Override.Identifier, r.ConfigVersion)
			})
			if connect.CodeOf(err) == connect.CodeAlreadyExists {
				if id := sameOverride(s, ovs, o); id != "" {
					return fmt.Errorf("%s has that override already, %s (sluice overrides update %s changes it): %w", o.Identifier, id, id, err)
				}
			}
			return err
		}
	}},
	"overrides update": {"ID", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		of := defineOverrideOpts(fs)
		tier, ruleID, block, lasts, pf := of.tier, of.ruleID, of.block, of.lasts, of.params
		return func(s *session, c *http.Client, id string) error {
			if err := of.resolveRule(s, c); err != nil {
				return err
			}
			ovs := sluicev1connect.NewOverrideServiceClient(c, s.server)
			return edit(func() error {
				o, err := overrideByID(s, ovs, id)
				if err != nil {
					return err
				}
				fs.Visit(func(fl *flag.Flag) {
					switch fl.Name {
					case "identifier":
						o.Identifier = *of.identifier
					case "descriptor":
						o.DescriptorKey = *of.descriptor
					case "tier":
						o.Tier = *tier
					case "rule":
						o.RuleId = *ruleID
					case "block":
						o.Block = *block
					case "for":
						o.ExpiresAt = nil
						if *lasts > 0 {
							o.ExpiresAt = timestamppb.New(time.Now().Add(*lasts))
						}
					}
				})
				if o.RuleId == "" || o.Block {
					o.Params = nil
				} else {
					given, err := overrideParams(fs, pf)
					if err != nil {
						return err
					}
					// Parameters given, or a new rule: the control plane
					// completes them; else they stay as they are.
					if o.Params == nil || isSet(fs, "rule") || proto.Size(given) > 0 {
						o.Params = given
					}
				}
				return call(s, ovs.UpdateOverride, &sluicev1.UpdateOverrideRequest{TenantId: s.tenant, Override: o}, func(w *tabwriter.Writer, r *sluicev1.UpdateOverrideResponse) {
					fmt.Fprintf(w, "updated override %s for %s, config version %d\n", o.Id, o.Identifier, r.ConfigVersion)
				})
			})
		}
	}},
	"overrides delete": plain("ID", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewOverrideServiceClient(c, s.server).DeleteOverride, &sluicev1.DeleteOverrideRequest{TenantId: s.tenant, OverrideId: id}, func(w *tabwriter.Writer, r *sluicev1.DeleteOverrideResponse) {
			fmt.Fprintf(w, "deleted override %s, config version %d\n", id, r.ConfigVersion)
		})
	}),
	"keys list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		revoked := fs.Bool("revoked", false, "revoked keys too")
		return func(s *session, c *http.Client, _ string) error {
			list := cli.AllPages(sluicev1connect.NewKeyServiceClient(c, s.server).ListKeys, func(r *sluicev1.ListKeysRequest, token string) { r.PageToken = token },
				func(all, page *sluicev1.ListKeysResponse) { all.Keys = append(all.Keys, page.Keys...) })
			return call(s, list, &sluicev1.ListKeysRequest{TenantId: s.tenant, PageSize: 1000, ShowRevoked: *revoked}, func(w *tabwriter.Writer, r *sluicev1.ListKeysResponse) {
				fmt.Fprintln(w, "ID\tKIND\tNAME\tPREFIX\tLAST USED\tREVOKED\tEXPIRES")
				for _, k := range r.Keys {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Id, strings.ToLower(strings.TrimPrefix(k.Kind.String(), "KEY_KIND_")), k.Name, k.Prefix,
						when(k.LastUsedAt.IsValid(), k.LastUsedAt.AsTime()), when(k.RevokedAt.IsValid(), k.RevokedAt.AsTime()), expiry(k.ExpiresAt))
				}
			})
		}
	}},
	"keys create": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		kind, name := fs.String("kind", "check", "admin (the control plane), viewer (the control plane, read only: an analyst's) or check (the data plane)"), fs.String("name", "", "a name to tell the key by")
		lasts := days.Flag(fs, "for", 0, "expires after this long, e.g. 30d (0: never)")
		return func(s *session, c *http.Client, _ string) error {
			kv, err := enumFlag(sluicev1.KeyKind_value, "KEY_KIND_", fs.Lookup("kind"))
			if err != nil {
				return err
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
		}
	}},
	"audit list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		limit := fs.Int("limit", 20, "at most this many entries, newest first (at most 1000)")
		before := fs.Int64("before", 0, "entries older than this id (paging: the last id shown)")
		resource := fs.String("resource", "", "only the history of this resource (a rule's, an override's or a key's id)")
		return func(s *session, c *http.Client, _ string) error {
			req := &sluicev1.ListAuditRequest{TenantId: s.tenant, Limit: int32(min(max(*limit, 1), 1000)), BeforeId: *before, ResourceId: *resource}
			return call(s, sluicev1connect.NewAuditServiceClient(c, s.server).ListAudit, req, func(w *tabwriter.Writer, r *sluicev1.ListAuditResponse) {
				fmt.Fprintln(w, "ID\tAT\tACTOR\tACTION\tRESOURCE\tVERSION\tCHANGES")
				for _, e := range r.Entries {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s %s\t%d\t%s\n", e.Id, when(e.At.IsValid(), e.At.AsTime()), cmp.Or(e.ActorName, e.Actor), e.Action, e.Resource, e.ResourceId, e.ConfigVersion, changesText(e.Changes))
				}
			})
		}
	}},
	"deciders list": plain("", func(s *session, c *http.Client, _ string) error {
		tenants := tenantsByID(s, sluicev1connect.NewTenantServiceClient(c, s.server))
		return call(s, sluicev1connect.NewDeciderServiceClient(c, s.server).ListDeciders, &sluicev1.ListDecidersRequest{}, func(w *tabwriter.Writer, r *sluicev1.ListDecidersResponse) {
			// LATEST is the tenant's version now: a decider whose VERSION is
			// below has not pulled since the tenant changed (cut off from
			// the control plane, or refusing the snapshot).
			fmt.Fprintln(w, "DECIDER\tLAST SYNCED\tTENANT\tVERSION\tLATEST\tREDIS BREAKER\tREDIS ERRORS\tEVENTS WAITING\tEVENTS DROPPED")
			for _, d := range r.Deciders {
				synced := when(d.LastSyncedAt.IsValid(), d.LastSyncedAt.AsTime())
				if d.LastSyncedAt.IsValid() {
					synced += " (" + ago(time.Since(d.LastSyncedAt.AsTime())) + ")"
				}
				h := d.GetHealth()
				health := fmt.Sprintf("%s\t%d\t%d\t%d", cmp.Or(h.GetBreaker(), "-"), h.GetEngineErrors(), h.GetEventsSpooled()+h.GetEventsQueued(), h.GetEventsDropped())
				if len(d.ConfigVersions) == 0 {
					fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t%s\n", d.Name, synced, health)
				}
				for _, id := range slices.Sorted(maps.Keys(d.ConfigVersions)) {
					slug, latest := id, "-"
					if t := tenants[id]; t != nil {
						slug, latest = t.Slug, strconv.FormatInt(t.ConfigVersion, 10)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", d.Name, synced, slug, d.ConfigVersions[id], latest, health)
				}
			}
		})
	}),
	"keys rotate": {"ID", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		grace := days.Flag(fs, "grace", 24*time.Hour, "how long the old key keeps working, at most 30d (0: revoked at once)")
		return func(s *session, c *http.Client, id string) error {
			req := &sluicev1.RotateKeyRequest{TenantId: s.tenant, KeyId: id, Grace: durationpb.New(*grace)}
			return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).RotateKey, req, func(w *tabwriter.Writer, r *sluicev1.RotateKeyResponse) {
				fmt.Fprintf(w, "rotated key %s into %s\nsecret\t%s\t(shown once: store it now)\n", r.Old.Id, r.Key.Id, r.Secret)
				if r.Old.RevokedAt.IsValid() {
					fmt.Fprintf(w, "old key\trevoked\n")
				} else {
					fmt.Fprintf(w, "old key\tworks until %s\n", r.Old.ExpiresAt.AsTime().Format(time.RFC3339))
				}
			})
		}
	}},
	"keys revoke": plain("ID", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).RevokeKey, &sluicev1.RevokeKeyRequest{TenantId: s.tenant, KeyId: id}, func(w *tabwriter.Writer, _ *sluicev1.RevokeKeyResponse) {
			fmt.Fprintf(w, "revoked key %s\n", id)
		})
	}),
}

// usageError is a mistake in a command's arguments found after parsing
// them (an unknown algorithm, a malformed match): exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string      { return e.msg }
func (usageError) Is(target error) bool { return target == errUsage }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// runResource runs `sluice <resource> <verb> ...`.
func runResource(ctx context.Context, resource string, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	switch resource {
	case "check":
		return runCheck(ctx, args, stdout, stderr, getenv)
	case "reset":
		return runReset(ctx, args, stdout, stderr, getenv)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, resourceUsage)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, resourceUsage)
		return errUsage
	}
	v, ok := verbs[resource+" "+args[0]]
	if !ok {
		fmt.Fprintf(stderr, "unknown command %q\n%s", resource+" "+args[0], resourceUsage)
		return errUsage
	}
	name := "sluice " + resource + " " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimSpace("usage: "+name+" [flags] "+v.arg))
		if n := verbNotes[resource+" "+args[0]]; n != "" {
			fmt.Fprintln(fs.Output(), n)
		}
		fs.PrintDefaults()
	}
	s := &session{ctx: ctx, out: stdout, key: getenv("SLUICE_KEY")}
	fs.StringVar(&s.server, "server", flagenv.NewEnv(getenv).String("SLUICE_SERVER", defaultAddress), "control plane URL (env SLUICE_SERVER)")
	fs.StringVar(&s.tenant, "tenant", "", "tenant id or slug (required with the operator key)")
	fs.BoolVar(&s.json, "json", false, "print JSON")
	run := v.flags(fs)
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	want := 1 // the argument
	if v.arg == "" {
		want = 0
	}
	optional := strings.HasPrefix(v.arg, "[")
	if len(pos) != want && !(optional && len(pos) == 0) {
		if len(pos) > want {
			fmt.Fprintf(stderr, "unexpected argument %q: give the rest as flags\n", pos[want])
		} else {
			fmt.Fprintf(stderr, "missing the argument: %s\n", v.arg)
		}
		fs.Usage()
		return errUsage
	}
	if s.key == "" {
		fmt.Fprint(stderr, "set SLUICE_KEY to the operator key or a tenant admin key (reports: or a viewer key)\n")
		return errUsage
	}
	var arg string
	if len(pos) == 1 {
		arg = pos[0]
	}
	if s.tenant != "" {
		if s.tenant, err = tenantIDOf(s, http.DefaultClient, s.tenant); err != nil {
			return err
		}
	}
	if resource == "tenants" && arg != "" {
		if arg, err = tenantIDOf(s, http.DefaultClient, arg); err != nil {
			return err
		}
	}
	err = run(s, http.DefaultClient, arg)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, ue.msg)
	}
	return err
}

// runCheck asks a decider for a decision: exit 0 when allowed, 4 when
// rejected.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	var cost *int64
	var peek *bool
	var limit, lease *string
	var release *bool
	dc, err := parseDeciderCall(ctx, "check", "[-cost N] [-peek] [-limit N/WINDOW[/ALGORITHM]] [-lease NAME [-release]] ", args, stdout, stderr, getenv, func(fs *flag.FlagSet) {
		cost = fs.Int64("cost", 0, "cost units (default 1)")
		peek = fs.Bool("peek", false, "ask without consuming whether the request would be admitted")
		lease = fs.String("lease", "", "concurrency rules: the lease to take or renew (empty: a new one, which the answer names)")
		release = fs.Bool("release", false, "end the -lease named on the concurrency rules the request meets, in place of a check")
		limit = fs.String("limit", "", "decide by this limit alone, such as 100/1m (a fixed window) or 100/1m/token_bucket, in place of the tier's rules")
	})
	if err != nil {
		return err
	}
	if *release && *lease == "" {
		fmt.Fprintln(stderr, "-release needs the -lease to end")
		return errUsage
	}
	req := &sluicev1.CheckRequest{Tier: dc.tier, Cost: *cost, Peek: *peek, Descriptors: dc.descriptors, Lease: *lease, Release: *release}
	if *limit != "" {
		n, w, _ := strings.Cut(*limit, "/")
		w, a, named := strings.Cut(w, "/")
		requests, nerr := strconv.ParseInt(n, 10, 64)
		window, werr := days.ParseDuration(w)
		var alg policy.Algorithm
		var aerr error
		if named {
			alg, aerr = decide.ParseRequestLimitAlgorithm(a)
		}
		if nerr != nil || werr != nil || aerr != nil {
			fmt.Fprintf(stderr, "-limit %q: want requests/window[/algorithm], such as 100/1m or 100/1m/token_bucket\n", *limit)
			return errUsage
		}
		req.Limit = &sluicev1.RequestLimit{Requests: requests, Window: durationpb.New(window), Algorithm: sluicev1.Algorithm(alg)}
	}
	asJSON := dc.session.json
	dc.session.json = false // its JSON is the HTTP API's, below
	res, err := callFor(dc.session, dc.client.Check, req, func(w *tabwriter.Writer, r *sluicev1.CheckResponse) {
		if asJSON {
			return
		}
		if *release {
			fmt.Fprintf(w, "released lease %s\n", *lease)
			return
		}
		fmt.Fprintf(w, "%s\t(config version %d)\n", map[bool]string{true: "allowed", false: "rejected"}[r.Allowed], r.ConfigVersion)

		fmt.Fprintln(w, "RULE\tALLOWED\tLIMIT\tREMAINING\tRESET\tRETRY AFTER")
		for _, x := range r.Rules {
			fmt.Fprintf(w, "%s\t%v\t%d\t%d\t%s\t%s\n", x.GetRuleName(), x.GetAllowed(), x.GetLimit(), x.GetRemaining(), waitText(x.GetResetAfter().AsDuration()), waitText(x.GetRetryAfter().AsDuration()))
		}
		if r.Lease != "" {
			w.Flush() // a line of its own, outside the table's columns
			fmt.Fprintf(w, "lease %s: held until its TTL, or ended by sluice check -release -lease %s KEY=VALUE...\n", r.Lease, r.Lease)
		}
	})
	if err != nil {
		return err
	}
	if asJSON {
		if err := printCheckJSON(dc.session.out, res); err != nil {
			return err
		}
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
	decider := fs.String("decider", flagenv.NewEnv(getenv).String("SLUICE_DECIDER", defaultAddress), "decider URL (env SLUICE_DECIDER)")
	tier := fs.String("tier", "", "tier to apply")
	asJSON := fs.Bool("json", false, "print JSON")
	more(fs)
	descs, err := parseArgs(fs, args)
	if err != nil || len(descs) == 0 {
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
	for _, a := range descs {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "descriptor %q: want KEY=VALUE\n", a)
			return nil, errUsage
		}
		dc.descriptors = append(dc.descriptors, &sluicev1.Descriptor{Key: k, Value: v})
	}
	return dc, nil
}

// tenantStatus is t's status as -status names it: active or suspended.
func tenantStatus(t *sluicev1.Tenant) string {
	return strings.ToLower(strings.TrimPrefix(t.Status.String(), "TENANT_STATUS_"))
}

func algorithmName(a sluicev1.Algorithm) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "ALGORITHM_"))
}

// tenantsByID is every tenant by id, for the commands that name the
// tenants they show (nil when they cannot be listed).
func tenantsByID(s *session, tenants sluicev1connect.TenantServiceClient) map[string]*sluicev1.Tenant {
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allTenants(tenants.ListTenants)(s.ctx, req)
	if err != nil {
		return nil
	}
	byID := make(map[string]*sluicev1.Tenant, len(res.Msg.Tenants))
	for _, t := range res.Msg.Tenants {
		byID[t.Id] = t
	}
	return byID
}

// listTiers is the tenant's tiers with their rules, for the commands
// that look a tier or a rule up.
func listTiers(s *session, tiers sluicev1connect.TierServiceClient) (*sluicev1.ListTiersResponse, error) {
	req := connect.NewRequest(&sluicev1.ListTiersRequest{TenantId: s.tenant})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := tiers.ListTiers(s.ctx, req)
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// tiersRules lists the rules of the tenant's tiers in the tiers' order,
// or of the one tier only names (by name or id), appending each rule's
// tier name to names.
func tiersRules(tiers sluicev1connect.TierServiceClient, only string, names *[]string) func(context.Context, *connect.Request[sluicev1.ListTiersRequest]) (*connect.Response[sluicev1.ListRulesResponse], error) {
	return func(ctx context.Context, req *connect.Request[sluicev1.ListTiersRequest]) (*connect.Response[sluicev1.ListRulesResponse], error) {
		res, err := tiers.ListTiers(ctx, req)
		if err != nil {
			return nil, err
		}
		out := &sluicev1.ListRulesResponse{}
		found := false
		for _, t := range res.Msg.Tiers {
			if only != "" && only != t.Name && only != t.Id {
				continue
			}
			found = true
			out.Rules = append(out.Rules, t.Rules...)
			for range t.Rules {
				*names = append(*names, t.Name)
			}
		}
		if !found && only != "" {
			return nil, protoconv.Error(policy.CodeNotFound, fmt.Sprintf("no tier %q", only))
		}
		return connect.NewResponse(out), nil
	}
}

// allOverrides is ListOverrides over every page: the overrides of all of
// them in one answer.
func allOverrides(ovs sluicev1connect.OverrideServiceClient) func(context.Context, *connect.Request[sluicev1.ListOverridesRequest]) (*connect.Response[sluicev1.ListOverridesResponse], error) {
	return cli.AllPages(ovs.ListOverrides, func(r *sluicev1.ListOverridesRequest, token string) { r.PageToken = token },
		func(all, page *sluicev1.ListOverridesResponse) {
			all.Overrides = append(all.Overrides, page.Overrides...)
		})
}

// changesText is an audit entry's changes on one line: "limit 10→20" for
// a field changed, "name=ci" for one set, "-name" for one unset.
func changesText(changes []*sluicev1.AuditChange) string {
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		switch {
		case c.Old == "":
			parts = append(parts, c.Field+"="+c.New)
		case c.New == "":
			parts = append(parts, "-"+c.Field)
		default:
			parts = append(parts, c.Field+" "+c.Old+"→"+c.New)
		}
	}
	return strings.Join(parts, ", ")
}

// allTenants is ListTenants over every page.
func allTenants(list func(context.Context, *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error)) func(context.Context, *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error) {
	return cli.AllPages(list, func(r *sluicev1.ListTenantsRequest, token string) { r.PageToken = token },
		func(all, page *sluicev1.ListTenantsResponse) { all.Tenants = append(all.Tenants, page.Tenants...) })
}

// overrideOpts are the flags of overrides create and update.
type overrideOpts struct {
	identifier, descriptor, tier, ruleID *string
	block                                *bool
	lasts                                *time.Duration
	params                               paramOpts
}

func defineOverrideOpts(fs *flag.FlagSet) overrideOpts {
	return overrideOpts{
		identifier: fs.String("identifier", "", "the client's identifier, or a pattern whose * stands for any run of characters (acme-*, *@example.com)"),
		descriptor: fs.String("descriptor", "", "the descriptor that holds the identifier, e.g. ip (default client_id)"),
		tier:       fs.String("tier", "", "move the client to this tier (name)"),
		ruleID:     fs.String("rule", "", "replace this rule's limit: the rule's id, or TIER/RULE by name"),
		block:      fs.Bool("block", false, "block the client (with -rule, on that rule only)"),
		lasts:      days.Flag(fs, "for", 0, "expires after this long from now, e.g. 24h or 30d (0: never)"),
		params:     defineParamOpts(fs),
	}
}

// whom is an override's identifier, after its descriptor's name unless
// that is client_id: ip=10.0.0.7.
func whom(o *sluicev1.Override) string {
	if k := o.GetDescriptorKey(); k != "" && k != policy.DefaultIdentifierKey {
		return k + "=" + o.GetIdentifier()
	}
	return o.GetIdentifier()
}

// overrideParams is the params of an override from the flags given:
// without -algorithm, partial params, which the control plane completes
// from the override's own (an update keeping its rule) or its rule's,
// what they do not set kept and a burst following -limit unless -burst is
// given; with -algorithm, whole.
func overrideParams(fs *flag.FlagSet, pf paramOpts) (*sluicev1.LimitParams, error) {
	p := &sluicev1.LimitParams{}
	return p, pf.apply(fs, p)
}

// resolveRule turns a -rule naming a rule (ruleRef) into the rule's id.
func (o overrideOpts) resolveRule(s *session, c *http.Client) error {
	id, err := ruleRef(s, c, *o.ruleID)
	*o.ruleID = id
	return err
}

// sameOverride is the id of the tenant's override that o would duplicate:
// of its client, descriptor and kind (a tier, a rule's limit, a block of
// the rule or of everything), or "" when none is found.
func sameOverride(s *session, ovs sluicev1connect.OverrideServiceClient, o *sluicev1.Override) string {
	req := connect.NewRequest(&sluicev1.ListOverridesRequest{TenantId: s.tenant, IdentifierPrefix: o.Identifier, PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allOverrides(ovs)(s.ctx, req)
	if err != nil {
		return ""
	}
	for _, x := range res.Msg.Overrides {
		if x.Identifier == o.Identifier && x.DescriptorKey == cmp.Or(o.DescriptorKey, "client_id") && x.Block == o.Block && x.RuleId == o.RuleId {
			return x.Id
		}
	}
	return ""
}

// overrideByID finds the override id among the tenant's.
func overrideByID(s *session, ovs sluicev1connect.OverrideServiceClient, id string) (*sluicev1.Override, error) {
	req := connect.NewRequest(&sluicev1.ListOverridesRequest{TenantId: s.tenant, PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allOverrides(ovs)(s.ctx, req)
	if err != nil {
		return nil, err
	}
	for _, o := range res.Msg.Overrides {
		if o.Id == id {
			return o, nil
		}
	}
	return nil, protoconv.Error(policy.CodeNotFound, fmt.Sprintf("no override %q", id))
}

// tenantIDOf is the id of the tenant v names: the tenant whose slug is v,
// else v as it is (an id, or a slug the server will say it does not know).
// With a tenant's own key, which may not list tenants, v goes as it is.
func tenantIDOf(s *session, c *http.Client, v string) (string, error) {
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{SlugPrefix: strings.ReplaceAll(strings.ToLower(v), "_", "-"), PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allTenants(sluicev1connect.NewTenantServiceClient(c, s.server).ListTenants)(s.ctx, req)
	if err != nil {
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			return v, nil // a tenant's own key, which needs no -tenant
		}
		return "", err
	}
	// An envoyproxy/ratelimit domain names its tenant too: mongo_cps is
	// the tenant mongo-cps its import made.
	slug := strings.ReplaceAll(strings.ToLower(v), "_", "-")
	for _, t := range res.Msg.Tenants {
		if t.Slug == v || t.Slug == slug {
			return t.Id, nil
		}
	}
	return v, nil
}

// tierIDOf is the id of the tier v names, by name or id.
func tierIDOf(s *session, tiers sluicev1connect.TierServiceClient, v string) (string, error) {
	if v == "" {
		return "", usageErrorf("-tier: the rule's tier, by name or id")
	}
	res, err := listTiers(s, tiers)
	if err != nil {
		return "", err
	}
	for _, t := range res.Tiers {
		if v == t.Name || v == t.Id {
			return t.Id, nil
		}
	}
	return "", protoconv.Error(policy.CodeNotFound, fmt.Sprintf("no tier %q", v))
}

// ruleNames is the "tier/rule" name of each of the tenant's rules by id,
// for the commands that show rules by name (nil when they cannot be
// listed: ids are shown).
func ruleNames(s *session, tiers sluicev1connect.TierServiceClient) map[string]string {
	res, err := listTiers(s, tiers)
	if err != nil {
		return nil
	}
	names := map[string]string{}
	for _, t := range res.Tiers {
		for _, r := range t.Rules {
			names[r.Id] = t.Name + "/" + r.Name
		}
	}
	return names
}

// ruleByID is the rule of that id, as it stands.
func ruleByID(s *session, tiers sluicev1connect.TierServiceClient, id string) (*sluicev1.Rule, error) {
	res, err := listTiers(s, tiers)
	if err != nil {
		return nil, err
	}
	for _, t := range res.Tiers {
		for _, r := range t.Rules {
			if r.Id == id {
				return r, nil
			}
		}
	}
	return nil, protoconv.Error(policy.CodeNotFound, fmt.Sprintf("no rule %q", id))
}

// windowText is a limit's window as people read it: a duration, or a
// calendar unit ("month", "day America/New_York").
func windowText(p *sluicev1.LimitParams) string {
	if c := p.GetCalendar(); c != sluicev1.Calendar_CALENDAR_UNSPECIFIED {
		return strings.TrimSpace(strings.ToLower(strings.TrimPrefix(c.String(), "CALENDAR_")) + " " + p.GetTimeZone())
	}
	return days.Format(p.GetWindow().AsDuration())
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
	if r.Quota {
		f = append(f, "quota")
	}
	if len(r.Replaces) > 0 {
		f = append(f, "replaces "+strings.Join(r.Replaces, "+"))
	}
	if r.Sync != nil {
		f = append(f, "sync "+days.Format(r.Sync.AsDuration()))
	}
	if m := r.FailureMode; m != sluicev1.FailureMode_FAILURE_MODE_UNSPECIFIED && m != sluicev1.FailureMode_FAILURE_MODE_LOCAL {
		f = append(f, "fails "+strings.ToLower(strings.TrimPrefix(m.String(), "FAILURE_MODE_")))
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

// waitText is a reset or retry-after as people read it: to the millisecond
// ("1m37.62s"), "never" when negative.
func waitText(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d >= time.Minute:
		d = d.Round(time.Second) // 13m45s, not 13m44.722s
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	return days.Format(d)
}

func when(ok bool, t time.Time) string {
	if !ok {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ago says roughly how long ago something was, d before now. A decider
// pulls every 30 s by default: one last synced minutes ago has stopped,
// or is cut off from the control plane.
func ago(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%d h ago", int(d.Hours()))
}

// expiry says when a key or an override expires: never, a time, or
// "expired" and the time.
func expiry(t *timestamppb.Timestamp) string {
	switch {
	case t == nil:
		return "never"
	case !time.Now().Before(t.AsTime()):
		return "expired " + when(true, t.AsTime())
	}
	return when(true, t.AsTime())
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
	if ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "connection refused") {
		b.WriteString("\n  nothing listens there: is it running? (SLUICE_SERVER names the control plane, SLUICE_DECIDER the decider)")
	}
	return b.String()
}

// printCheckJSON writes a check's answer as POST /v1/check answers it
// (docs/api.md, checkapi.CheckJSON): the same field names, waits in
// milliseconds.
func printCheckJSON(w io.Writer, r *sluicev1.CheckResponse) error {
	ms := func(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
	out := checkapi.CheckJSON{Allowed: r.Allowed, Rules: []httpport.RuleJSON{}, ConfigVersion: r.ConfigVersion, Lease: r.Lease, Degraded: r.Degraded}
	for _, x := range r.Rules {
		j := httpport.RuleJSON{Rule: x.RuleName, Allowed: x.Allowed, Shadow: x.Shadow, Limit: x.Limit, Remaining: x.Remaining,
			ResetAfterMS: ms(x.GetResetAfter().AsDuration()), DelayMS: ms(x.GetDelay().AsDuration()), Message: x.Message, Unenforced: x.Unenforced}
		if x.RetryAfter != nil {
			v := ms(x.RetryAfter.AsDuration())
			j.RetryAfterMS = &v
		}
		out.Rules = append(out.Rules, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
