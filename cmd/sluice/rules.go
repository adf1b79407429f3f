package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// ruleVerbs manage a tenant's tiers and their rules.
var ruleVerbs = map[string]verb{
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
}

func algorithmName(a sluicev1.Algorithm) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "ALGORITHM_"))
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
