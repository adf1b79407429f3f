package controlplane

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/reports"
)

type reportServer struct{ *server }

// rangeOf reads a request's [from, to); a missing bound stays zero, which
// reports refuses with a field error.
func rangeOf(from, to *timestamppb.Timestamp) reports.Range {
	var r reports.Range
	if from != nil {
		r.From = from.AsTime()
	}
	if to != nil {
		r.To = to.AsTime()
	}
	return r
}

func countsToProto(c reports.Counts) *sluicev1.Counts {
	return &sluicev1.Counts{Allowed: c.Allowed, Rejected: c.Rejected, ShadowRejected: c.ShadowRejected, DroppedRejections: c.DroppedRejections}
}

func stepOf(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

func (s reportServer) GetTimeseries(ctx context.Context, req *connect.Request[sluicev1.GetTimeseriesRequest]) (*connect.Response[sluicev1.GetTimeseriesResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	points, err := s.reports.Timeseries(ctx, tenant, rangeOf(m.From, m.To), stepOf(m.Step, 0), m.RuleId, m.Tier)
	out := &sluicev1.GetTimeseriesResponse{}
	for _, p := range points {
		out.Points = append(out.Points, &sluicev1.TimeseriesPoint{Start: timestamppb.New(p.Start), Counts: countsToProto(p.Counts)})
	}
	return reply(ctx, s.server, out, err)
}

func (s reportServer) GetTopClients(ctx context.Context, req *connect.Request[sluicev1.GetTopClientsRequest]) (*connect.Response[sluicev1.GetTopClientsResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	clients, err := s.reports.TopClients(ctx, tenant, rangeOf(m.From, m.To), m.RuleId, int(m.Limit))
	out := &sluicev1.GetTopClientsResponse{}
	for _, c := range clients {
		out.Clients = append(out.Clients, &sluicev1.TopClient{ClientKey: c.ClientKey, RuleId: c.RuleID, RuleName: c.RuleName, Rejected: c.Rejected, Error: c.Error})
	}
	return reply(ctx, s.server, out, err)
}

func (s reportServer) GetBreakdown(ctx context.Context, req *connect.Request[sluicev1.GetBreakdownRequest]) (*connect.Response[sluicev1.GetBreakdownResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	by := reports.ByRule
	switch m.By {
	case sluicev1.BreakdownBy_BREAKDOWN_BY_TIER:
		by = reports.ByTier
	case sluicev1.BreakdownBy_BREAKDOWN_BY_REGION:
		by = reports.ByRegion
	}
	rows, err := s.reports.Breakdown(ctx, tenant, rangeOf(m.From, m.To), by)
	out := &sluicev1.GetBreakdownResponse{}
	for _, r := range rows {
		out.Rows = append(out.Rows, &sluicev1.BreakdownRow{RuleId: r.RuleID, RuleName: r.RuleName, Tier: r.Tier, Region: r.Region, Counts: countsToProto(r.Counts)})
	}
	return reply(ctx, s.server, out, err)
}

func (s reportServer) ExportCSV(ctx context.Context, req *connect.Request[sluicev1.ExportCSVRequest]) (*connect.Response[sluicev1.ExportCSVResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	r := rangeOf(m.From, m.To)
	var name, body string
	switch m.Report {
	case sluicev1.Report_REPORT_TOP_CLIENTS:
		limit := int(m.Limit)
		if limit == 0 {
			limit = reports.MaxTopLimit
		}
		var clients []reports.TopClient
		clients, err = s.reports.TopClients(ctx, tenant, r, "", limit)
		name, body = "top-clients", reports.TopClientsCSV(clients)
	case sluicev1.Report_REPORT_BREAKDOWN_BY_RULE, sluicev1.Report_REPORT_BREAKDOWN_BY_TIER, sluicev1.Report_REPORT_BREAKDOWN_BY_REGION:
		by, n := reports.ByRule, "by-rule"
		switch m.Report {
		case sluicev1.Report_REPORT_BREAKDOWN_BY_TIER:
			by, n = reports.ByTier, "by-tier"
		case sluicev1.Report_REPORT_BREAKDOWN_BY_REGION:
			by, n = reports.ByRegion, "by-region"
		}
		var rows []reports.Row
		rows, err = s.reports.Breakdown(ctx, tenant, r, by)
		name, body = n, reports.BreakdownCSV(rows, by)
	default:
		var points []reports.Point
		points, err = s.reports.Timeseries(ctx, tenant, r, stepOf(m.Step, time.Minute), "", "")
		name, body = "timeseries", reports.TimeseriesCSV(points)
	}
	filename := fmt.Sprintf("sluice-%s-%s.csv", name, r.From.UTC().Format("20060102T1504Z"))
	return reply(ctx, s.server, &sluicev1.ExportCSVResponse{Filename: filename, Csv: body}, err)
}
