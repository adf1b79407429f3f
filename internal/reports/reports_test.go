package reports

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Reports read whole hours from the hourly rollups (which a trigger keeps
// as the minutes are written) and the rest from the minutes': over random
// ranges, steps and filters, every answer is the one counted from the
// minutes alone, and where the minutes were pruned, from their hours.
func TestReportsOfHoursAndMinutesMatchTheMinutes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	type row struct {
		minute     time.Time
		tier, rule string
		c          Counts
	}
	var data []row
	var cols [7][]any
	for m := range 3 * 24 * 60 {
		for _, k := range [][2]string{{"free", "r1"}, {"free", "r2"}, {"pro", "r3"}, {"", ""}} {
			if rng.IntN(10) < 3 {
				continue
			}
			r := row{base.Add(time.Duration(m) * time.Minute), k[0], k[1], Counts{
				Allowed: rng.Int64N(100), Rejected: rng.Int64N(10), ShadowRejected: rng.Int64N(5)}}
			if k[1] == "" {
				r.c = Counts{DroppedRejections: rng.Int64N(3)}
			}
			data = append(data, r)
			for i, v := range []any{r.minute, r.tier, r.rule, r.c.Allowed, r.c.Rejected, r.c.ShadowRejected, r.c.DroppedRejections} {
				cols[i] = append(cols[i], v)
			}
		}
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed,
			rejected, shadow_rejected, dropped_rejections)
		SELECT 'a', * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])`,
		cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]); err != nil {
		t.Fatal(err)
	}
	add := func(c *Counts, d Counts) {
		c.Allowed, c.Rejected = c.Allowed+d.Allowed, c.Rejected+d.Rejected
		c.ShadowRejected, c.DroppedRejections = c.ShadowRejected+d.ShadowRejected, c.DroppedRejections+d.DroppedRejections
	}
	s := New(pool)
	ctx := context.Background()
	steps := []time.Duration{time.Minute, 7 * time.Minute, time.Hour, 90 * time.Minute, 3 * time.Hour, 24 * time.Hour}
	// The first 60 reports with every minute kept; the next 60 with the
	// first day's minutes pruned, their hours kept: an hour of them counts
	// at its start when it lies within the range, and not at all when the
	// range cuts it.
	pruned := time.Time{}
	for i := range 120 {
		if i == 60 {
			pruned = base.Add(24 * time.Hour)
			if _, err := pool.Exec(ctx, `DELETE FROM analytics_minute WHERE minute < $1`, pruned); err != nil {
				t.Fatal(err)
			}
		}
		from := base.Add(time.Duration(rng.IntN(48*60)) * time.Minute)
		if i%3 == 0 {
			from = from.Truncate(time.Hour)
		}
		r := Range{from, from.Add(time.Duration(1+rng.IntN(36*60)) * time.Minute)}
		step := steps[rng.IntN(len(steps))]
		if i%4 == 0 {
			step = max(time.Minute, r.To.Sub(r.From)/60/time.Minute*time.Minute) // the console's
		}
		var rule, tier string
		switch i % 5 {
		case 1:
			rule = "r2"
		case 2:
			tier = "free"
		}
		name := fmt.Sprintf("%s+%v step %v rule %q tier %q", r.From.Format("02 15:04"), r.To.Sub(r.From), step, rule, tier)

		points, err := s.Timeseries(ctx, "a", r, step, rule, tier)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := make([]Counts, (r.To.Sub(r.From)+step-1)/step)
		byRule := map[[2]string]Counts{}
		byTier := map[string]Counts{}
		for _, d := range data {
			at := d.minute
			if at.Before(pruned) {
				at = at.Truncate(time.Hour)
				if at.Before(r.From) || at.Add(time.Hour).After(r.To) {
					continue
				}
			}
			if at.Before(r.From) || !at.Before(r.To) {
				continue
			}
			if (rule == "" || d.rule == rule) && (tier == "" || d.tier == tier) {
				add(&want[at.Sub(r.From)/step], d.c)
			}
			if d.rule != "" {
				c := byRule[[2]string{d.rule, d.tier}]
				add(&c, d.c)
				byRule[[2]string{d.rule, d.tier}] = c
				c = byTier[d.tier]
				add(&c, d.c)
				byTier[d.tier] = c
			}
		}
		if len(points) != len(want) {
			t.Fatalf("%s: %d points, want %d", name, len(points), len(want))
		}
		for j := range want {
			if points[j].Counts != want[j] {
				t.Fatalf("%s: point %d (%s) %+v, want %+v", name, j, points[j].Start.Format("02 15:04"), points[j].Counts, want[j])
			}
		}

		rows, err := s.Breakdown(ctx, "a", r, false)
		if err != nil || len(rows) != len(byRule) {
			t.Fatalf("%s: by rule %+v, %v; want %+v", name, rows, err, byRule)
		}
		for _, x := range rows {
			if x.Counts != byRule[[2]string{x.RuleID, x.Tier}] {
				t.Fatalf("%s: %s/%s %+v, want %+v", name, x.Tier, x.RuleID, x.Counts, byRule[[2]string{x.RuleID, x.Tier}])
			}
		}
		tiers, err := s.Breakdown(ctx, "a", r, true)
		if err != nil || len(tiers) != len(byTier) {
			t.Fatalf("%s: by tier %+v, %v; want %+v", name, tiers, err, byTier)
		}
		for _, x := range tiers {
			if x.Counts != byTier[x.Tier] {
				t.Fatalf("%s: tier %s %+v, want %+v", name, x.Tier, x.Counts, byTier[x.Tier])
			}
		}
	}
}
