package reports

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/policy"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed, rejected, shadow_rejected, dropped_rejections) VALUES
			('a', $1, 'free', 'r1', 10, 2, 0, 0),
			('a', $1 + interval '1 minute', 'free', 'r2', 5, 1, 3, 0),
			('a', $1 + interval '3 minutes', 'pro', 'r3', 7, 0, 0, 0),
			('a', $1 + interval '3 minutes', '', '', 0, 0, 0, 4),
			('b', $1, 'free', 'r1', 1000, 1000, 0, 0)`, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(context.Background(), `
		INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected, error) VALUES
			('a', 'r1', $1, 'alice', 2, 0), ('a', 'r2', $1, '=cmd()', 1, 0), ('b', 'r1', $1, 'mallory', 1000, 0)`, t0)
	if err != nil {
		t.Fatal(err)
	}
}

func TestTimeseriesFillsEveryStepOfOneTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	seed(t, pool)
	s := New(pool)
	points, err := s.Timeseries(context.Background(), "a", Range{t0, t0.Add(4 * time.Minute)}, 2*time.Minute, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{
		{t0, Counts{Allowed: 15, Rejected: 3, ShadowRejected: 3}},
		{t0.Add(2 * time.Minute), Counts{Allowed: 7, DroppedRejections: 4}},
	}
	if len(points) != len(want) {
		t.Fatalf("points %v", points)
	}
	for i := range want {
		if !points[i].Start.Equal(want[i].Start) || points[i].Counts != want[i].Counts {
			t.Errorf("point %d: %+v, want %+v", i, points[i], want[i])
		}
	}
	empty, err := s.Timeseries(context.Background(), "a", Range{t0.Add(time.Hour), t0.Add(time.Hour + 3*time.Minute)}, time.Minute, "", "")
	if err != nil || len(empty) != 3 || empty[2].Counts != (Counts{}) {
		t.Fatalf("an empty range: %v, %v", empty, err)
	}
	byRule, _ := s.Timeseries(context.Background(), "a", Range{t0, t0.Add(4 * time.Minute)}, 4*time.Minute, "r2", "")
	if byRule[0].Counts != (Counts{Allowed: 5, Rejected: 1, ShadowRejected: 3}) {
		t.Fatalf("rule r2: %+v", byRule)
	}
}

func TestInvalidRequestsNameTheirFields(t *testing.T) {
	t.Parallel()
	s := New(pgtest.Pool(t))
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"from": func() error { _, err := s.Timeseries(ctx, "a", Range{To: t0}, time.Minute, "", ""); return err },
		"to":   func() error { _, err := s.Breakdown(ctx, "a", Range{t0, t0.Add(-time.Minute)}, false); return err },
		"step": func() error {
			_, err := s.Timeseries(ctx, "a", Range{t0, t0.Add(time.Hour)}, 90*time.Second, "", "")
			return err
		},
		"limit": func() error {
			_, err := s.TopClients(ctx, "a", Range{t0, t0.Add(time.Hour)}, "", MaxTopLimit+1)
			return err
		},
	} {
		var pe *policy.Error
		err := call()
		if !errors.As(err, &pe) || pe.Code != policy.CodeInvalid || len(pe.Fields) != 1 || pe.Fields[0].Field != name {
			t.Errorf("%s: %v, want a field error on %s", name, err, name)
		}
	}
	if _, err := s.Timeseries(ctx, "a", Range{t0, t0.Add(365 * 24 * time.Hour)}, time.Minute, "", ""); err == nil {
		t.Error("half a million points were not refused")
	}
}

func TestTopClientsAndBreakdownAndCSV(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	seed(t, pool)
	s := New(pool)
	r := Range{t0, t0.Add(time.Hour)}
	top, err := s.TopClients(context.Background(), "a", r, "", 0)
	if err != nil || len(top) != 2 || top[0].ClientKey != "alice" || top[0].Rejected != 2 {
		t.Fatalf("top clients %v, %v", top, err)
	}
	rows, err := s.Breakdown(context.Background(), "a", r, false)
	if err != nil || len(rows) != 3 || rows[0].RuleID != "r2" || rows[0].ShadowRejected != 3 {
		t.Fatalf("by rule %+v, %v", rows, err)
	}
	tiers, err := s.Breakdown(context.Background(), "a", r, true)
	if err != nil || len(tiers) != 2 || tiers[0].Tier != "free" || tiers[0].Allowed != 15 {
		t.Fatalf("by tier %+v, %v", tiers, err)
	}
	csv := TopClientsCSV(top)
	if !strings.Contains(csv, "\n'=cmd(),r2,,1,0\n") {
		t.Fatalf("a formula-like client key was not defused:\n%s", csv)
	}
	if got := BreakdownCSV(tiers, true); !strings.HasPrefix(got, "tier,allowed,rejected,shadow_rejected,dropped_rejections\nfree,15,3,3,0\n") {
		t.Fatalf("by tier CSV:\n%s", got)
	}
}
