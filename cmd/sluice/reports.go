package main

import (
	"cmp"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/days"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// reportVerbs read the analytics rollups through the reports API: what
// the console's dashboard shows, for a terminal or a script. A viewer key
// (an analyst's) is enough.
var reportVerbs = map[string]verb{
	"reports rejections": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		span := defineSpan(fs)
		step := days.Flag(fs, "step", time.Hour, "one row per this much (whole minutes)")
		rule := fs.String("rule", "", "only this rule (id or TIER/RULE)")
		tier := fs.String("tier", "", "only this tier (name)")
		return func(s *session, c *http.Client, _ string) error {
			from, to, ruleID, err := span.forRule(s, c, *rule)
			if err != nil {
				return err
			}
			req := &sluicev1.GetTimeseriesRequest{TenantId: s.tenant, From: from, To: to, Step: durationpb.New(*step), RuleId: ruleID, Tier: *tier}
			return call(s, sluicev1connect.NewReportServiceClient(c, s.server).GetTimeseries, req, func(w *tabwriter.Writer, r *sluicev1.GetTimeseriesResponse) {
				fmt.Fprintln(w, "FROM\tALLOWED\tREJECTED\tREJECTED %\tSHADOW WOULD-REJECT\tDROPPED EVENTS")
				for _, p := range r.Points {
					fmt.Fprintf(w, "%s\t%s\n", p.Start.AsTime().UTC().Format(time.RFC3339), countsText(p.Counts))
				}
			})
		}
	}},
	"reports top": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		span := defineSpan(fs)
		rule := fs.String("rule", "", "only this rule (id or TIER/RULE)")
		limit := fs.Int("limit", 10, "at most this many clients (1 to 1000)")
		return func(s *session, c *http.Client, _ string) error {
			from, to, ruleID, err := span.forRule(s, c, *rule)
			if err != nil {
				return err
			}
			req := &sluicev1.GetTopClientsRequest{TenantId: s.tenant, From: from, To: to, RuleId: ruleID, Limit: int32(min(max(*limit, 1), 1000))}
			return call(s, sluicev1connect.NewReportServiceClient(c, s.server).GetTopClients, req, func(w *tabwriter.Writer, r *sluicev1.GetTopClientsResponse) {
				fmt.Fprintln(w, "CLIENT\tRULE\tREJECTED")
				for _, tc := range r.Clients {
					rejected := fmt.Sprint(tc.Rejected)
					if tc.Error > 0 { // space-saving counters over-count by at most this
						rejected = fmt.Sprintf("%d (%d to %d)", tc.Rejected, tc.Rejected-tc.Error, tc.Rejected)
					}
					// Empty: a tenant-wide rule's one counter, or requests
					// that gave a per-client rule no identifier.
					fmt.Fprintf(w, "%s\t%s\t%s\n", cmp.Or(tc.ClientKey, "(empty)"), cmp.Or(tc.RuleName, tc.RuleId), rejected)
				}
			})
		}
	}},
	"reports breakdown": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		span := defineSpan(fs)
		by := fs.String("by", "rule", "rule, tier or region")
		return func(s *session, c *http.Client, _ string) error {
			from, to, err := span.times()
			if err != nil {
				return err
			}
			req := &sluicev1.GetBreakdownRequest{TenantId: s.tenant, From: from, To: to}
			switch *by {
			case "rule":
				req.By = sluicev1.BreakdownBy_BREAKDOWN_BY_RULE
			case "tier":
				req.By = sluicev1.BreakdownBy_BREAKDOWN_BY_TIER
			case "region":
				req.By = sluicev1.BreakdownBy_BREAKDOWN_BY_REGION
			default:
				return usageErrorf("-by: rule, tier or region, not %q", *by)
			}
			return call(s, sluicev1connect.NewReportServiceClient(c, s.server).GetBreakdown, req, func(w *tabwriter.Writer, r *sluicev1.GetBreakdownResponse) {
				switch req.By {
				case sluicev1.BreakdownBy_BREAKDOWN_BY_TIER:
					fmt.Fprintln(w, "TIER\tALLOWED\tREJECTED\tREJECTED %\tSHADOW WOULD-REJECT\tDROPPED EVENTS")
				case sluicev1.BreakdownBy_BREAKDOWN_BY_REGION:
					fmt.Fprintln(w, "REGION\tALLOWED\tREJECTED\tREJECTED %\tSHADOW WOULD-REJECT\tDROPPED EVENTS")
				default:
					fmt.Fprintln(w, "TIER\tRULE\tALLOWED\tREJECTED\tREJECTED %\tSHADOW WOULD-REJECT\tDROPPED EVENTS")
				}
				for _, row := range r.Rows {
					switch req.By {
					case sluicev1.BreakdownBy_BREAKDOWN_BY_TIER:
						fmt.Fprintf(w, "%s\t%s\n", row.Tier, countsText(row.Counts))
					case sluicev1.BreakdownBy_BREAKDOWN_BY_REGION:
						fmt.Fprintf(w, "%s\t%s\n", cmp.Or(row.Region, "-"), countsText(row.Counts))
					default:
						fmt.Fprintf(w, "%s\t%s\t%s\n", cmp.Or(row.Tier, "-"), cmp.Or(row.RuleName, row.RuleId), countsText(row.Counts))
					}
				}
			})
		}
	}},
	"reports csv": {"REPORT", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		span := defineSpan(fs)
		step := days.Flag(fs, "step", time.Minute, "rejections: one row per this much (whole minutes)")
		limit := fs.Int("limit", 1000, "top: at most this many clients (1 to 1000)")
		return func(s *session, c *http.Client, report string) error {
			from, to, err := span.times()
			if err != nil {
				return err
			}
			kind, ok := csvReports[report]
			if !ok {
				return usageErrorf("REPORT: rejections, top, rules, tiers or regions, not %q", report)
			}
			req := &sluicev1.ExportCSVRequest{TenantId: s.tenant, From: from, To: to, Report: kind, Step: durationpb.New(*step), Limit: int32(min(max(*limit, 1), 1000))}
			return call(s, sluicev1connect.NewReportServiceClient(c, s.server).ExportCSV, req, func(_ *tabwriter.Writer, r *sluicev1.ExportCSVResponse) {
				fmt.Fprint(s.out, r.Csv) // as it is: the tab writer would realign nothing
			})
		}
	}},
}

// csvReports are the reports csv's REPORT names.
var csvReports = map[string]sluicev1.Report{
	"rejections": sluicev1.Report_REPORT_TIMESERIES, "top": sluicev1.Report_REPORT_TOP_CLIENTS,
	"rules": sluicev1.Report_REPORT_BREAKDOWN_BY_RULE, "tiers": sluicev1.Report_REPORT_BREAKDOWN_BY_TIER,
	"regions": sluicev1.Report_REPORT_BREAKDOWN_BY_REGION,
}

// span is a report's time range: -since before -until (now unless given).
type span struct {
	since *time.Duration
	until *string
}

func defineSpan(fs *flag.FlagSet) span {
	return span{
		since: days.Flag(fs, "since", 24*time.Hour, "the range starts this long before -until"),
		until: fs.String("until", "", "the range ends here (RFC 3339, e.g. 2026-11-24T00:00:00Z; empty: now)"),
	}
}

func (sp span) times() (from, to *timestamppb.Timestamp, err error) {
	end := time.Now()
	if *sp.until != "" {
		if end, err = time.Parse(time.RFC3339, *sp.until); err != nil {
			return nil, nil, usageErrorf("-until: a time such as 2026-11-24T00:00:00Z, not %q", *sp.until)
		}
	}
	if *sp.since <= 0 {
		return nil, nil, usageErrorf("-since: a positive duration such as 24h")
	}
	return timestamppb.New(end.Add(-*sp.since)), timestamppb.New(end), nil
}

// forRule is times, and the id of the rule v names (ruleRef).
func (sp span) forRule(s *session, c *http.Client, v string) (from, to *timestamppb.Timestamp, ruleID string, err error) {
	if from, to, err = sp.times(); err != nil {
		return nil, nil, "", err
	}
	ruleID, err = ruleRef(s, c, v)
	return from, to, ruleID, err
}

// ruleRef is the id of the rule v names ("": none): by TIER/RULE, by its
// name alone when one tier only has a rule of that name, else v itself —
// an id, perhaps of a rule deleted since, whose counts the reports keep,
// or a request limit's ("limit/fixed_window/60s/client_id").
func ruleRef(s *session, c *http.Client, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	res, err := listTiers(s, sluicev1connect.NewTierServiceClient(c, s.server))
	if err != nil {
		return "", err
	}
	var named []string // tiers with a rule named v
	id := v
	tierName, _, path := strings.Cut(v, "/")
	for _, t := range res.Tiers {
		if path && t.Name == tierName {
			id = "" // TIER/RULE of one of the tiers: its rule, or none
		}
		for _, r := range t.Rules {
			switch {
			case t.Name+"/"+r.Name == v:
				return r.Id, nil
			case r.Name == v:
				named, id = append(named, t.Name), r.Id
			}
		}
	}
	if len(named) > 1 {
		return "", usageErrorf("rule %s: one of that name is in each of tiers %s; name one as TIER/RULE", v, strings.Join(named, ", "))
	}
	if id == "" {
		return "", protoconv.Error(policy.CodeNotFound, fmt.Sprintf("no rule %q", v))
	}
	return id, nil
}

// countsText is a row's counts, tab-separated: allowed, rejected, the
// rejected share, shadow would-rejects and dropped rejection events.
func countsText(c *sluicev1.Counts) string {
	share := "-"
	if total := c.GetAllowed() + c.GetRejected(); total > 0 {
		share = fmt.Sprintf("%.1f", 100*float64(c.GetRejected())/float64(total))
	}
	return fmt.Sprintf("%d\t%d\t%s\t%d\t%d", c.GetAllowed(), c.GetRejected(), share, c.GetShadowRejected(), c.GetDroppedRejections())
}
