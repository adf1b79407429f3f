package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/days"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// overrideVerbs manage a tenant's overrides: a client's own limits and blocks.
var overrideVerbs = map[string]verb{
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
}

// allOverrides is ListOverrides over every page: the overrides of all of
// them in one answer.
func allOverrides(ovs sluicev1connect.OverrideServiceClient) func(context.Context, *connect.Request[sluicev1.ListOverridesRequest]) (*connect.Response[sluicev1.ListOverridesResponse], error) {
	return cli.AllPages(ovs.ListOverrides, func(r *sluicev1.ListOverridesRequest, token string) { r.PageToken = token },
		func(all, page *sluicev1.ListOverridesResponse) {
			all.Overrides = append(all.Overrides, page.Overrides...)
		})
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
