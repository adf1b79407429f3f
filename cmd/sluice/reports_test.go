package main

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// TestDecisionsReachTheReports runs decisions through a decider, the
// embedded Kafka broker and the analytics consumer, and reads them back
// from the reports API: exactly the counts made, nothing more.
func TestDecisionsReachTheReports(t *testing.T) {
	env := devEnv(t)
	env["SLUICE_DELTA_INTERVAL"] = "100ms"
	banner, stop := startDev(t, env)
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner)[1]
	checkKey := regexp.MustCompile(`check key\s+(\S+)`).FindStringSubmatch(banner)[1]
	adminKey := regexp.MustCompile(`admin key\s+(\S+)`).FindStringSubmatch(banner)[1]
	check := func(client string) int {
		req, _ := http.NewRequest("POST", api+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"`+client+`"}}`))
		req.Header.Set("Authorization", "Bearer "+checkKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	from := timestamppb.New(time.Now().Add(-time.Hour))
	var allowed, rejected int64
	for range 15 { // the demo's free tier: 10 per minute per client
		if check("bob") == 200 {
			allowed++
		} else {
			rejected++
		}
	}
	if allowed != 10 || rejected != 5 {
		t.Fatalf("%d allowed, %d rejected; want 10 and 5", allowed, rejected)
	}

	reports := sluicev1connect.NewReportServiceClient(http.DefaultClient, api)
	totals := func() (a, r int64) {
		req := connect.NewRequest(&sluicev1.GetTimeseriesRequest{From: from, To: timestamppb.New(time.Now().Add(time.Hour)), Step: durationpb.New(time.Hour)})
		req.Header().Set("Authorization", "Bearer "+adminKey)
		res, err := reports.GetTimeseries(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Msg.Points {
			a, r = a+p.Counts.Allowed, r+p.Counts.Rejected
		}
		return a, r
	}
	waitTotals := func(wantA, wantR int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			a, r := totals()
			if a == wantA && r == wantR {
				return
			}
			if a > wantA || r > wantR || time.Now().After(deadline) {
				t.Fatalf("reports say %d allowed, %d rejected; want %d and %d", a, r, wantA, wantR)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitTotals(10, 5)
	// One more decision arrives alone: nothing was counted twice meanwhile.
	if check("carol") != 200 {
		t.Fatal("carol's first check was rejected")
	}
	waitTotals(11, 5)

	req := connect.NewRequest(&sluicev1.GetTopClientsRequest{From: from, To: timestamppb.Now()})
	req.Header().Set("Authorization", "Bearer "+adminKey)
	top, err := reports.GetTopClients(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Msg.Clients) != 1 || top.Msg.Clients[0].ClientKey != "bob" || top.Msg.Clients[0].Rejected != 5 || top.Msg.Clients[0].RuleName != "per-client" {
		t.Fatalf("top clients %v, want bob rejected 5 times by per-client", top.Msg.Clients)
	}
	breq := connect.NewRequest(&sluicev1.GetBreakdownRequest{From: from, To: timestamppb.Now(), By: sluicev1.BreakdownBy_BREAKDOWN_BY_TIER})
	breq.Header().Set("Authorization", "Bearer "+adminKey)
	rows, err := reports.GetBreakdown(context.Background(), breq)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows.Msg.Rows) != 1 || rows.Msg.Rows[0].Tier != "free" || rows.Msg.Rows[0].Counts.Allowed != 11 || rows.Msg.Rows[0].Counts.Rejected != 5 {
		t.Fatalf("breakdown by tier %v", rows.Msg.Rows)
	}
	ereq := connect.NewRequest(&sluicev1.ExportCSVRequest{From: from, To: timestamppb.Now(), Report: sluicev1.Report_REPORT_TOP_CLIENTS})
	ereq.Header().Set("Authorization", "Bearer "+adminKey)
	csv, err := reports.ExportCSV(context.Background(), ereq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(csv.Msg.Csv, "client_key,rule_id,rule_name,rejected,error\nbob,") || !strings.HasSuffix(csv.Msg.Filename, ".csv") {
		t.Fatalf("CSV %q (%s)", csv.Msg.Csv, csv.Msg.Filename)
	}

	// The same through the CLI, with an analyst's viewer key: it reads the
	// reports, and changes nothing.
	admin := map[string]string{"SLUICE_SERVER": api, "SLUICE_KEY": adminKey}
	sluice := func(env map[string]string, args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
		return out.String() + errOut.String(), err
	}
	out, err := sluice(admin, "keys", "create", "-kind", "viewer", "-name", "analyst")
	if err != nil {
		t.Fatalf("keys create -kind viewer: %v\n%s", err, out)
	}
	viewer := map[string]string{"SLUICE_SERVER": api, "SLUICE_KEY": regexp.MustCompile(`secret\s+(sk_viewer_\S+)`).FindStringSubmatch(out)[1]}
	for _, c := range []struct {
		args []string
		want string // a line of the answer
	}{
		{[]string{"reports", "top", "-since", "2h"}, `(?m)^bob\s+per-client\s+5$`},
		{[]string{"reports", "breakdown", "-by", "tier"}, `(?m)^free\s+11\s+5\s+31\.2\s+0\s+0$`},
		{[]string{"reports", "breakdown"}, `(?m)^free\s+per-client\s+11\s+5\s+31\.2\s+0\s+0$`},
		{[]string{"reports", "rejections", "-rule", "free/per-client", "-step", "24h", "-since", "24h", "-until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, `(?m)^\S+Z\s+11\s+5\s+31\.2\s+0\s+0$`},
		{[]string{"reports", "csv", "top"}, `(?m)^client_key,rule_id,rule_name,rejected,error\nbob,\S+,per-client,5,0$`},
	} {
		if out, err := sluice(viewer, c.args...); err != nil || !regexp.MustCompile(c.want).MatchString(out) {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
	}
	if _, err := sluice(viewer, "rules", "create", "-tier", "free", "-name", "x", "-limit", "1", "-window", "1s"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a viewer creating a rule: %v", err)
	}
	// A rule named alone is found when one tier has it; the demo's
	// per-client is in two.
	if out, err := sluice(viewer, "reports", "top", "-rule", "per-client"); !errors.Is(err, errUsage) || !strings.Contains(out, "tiers free, pro") {
		t.Errorf("an ambiguous rule name: %v\n%s", err, out)
	}
	if _, err := sluice(viewer, "reports", "csv", "everything"); !errors.Is(err, errUsage) {
		t.Errorf("an unknown report: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
