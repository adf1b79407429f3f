package reports

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
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
		"to":   func() error { _, err := s.Breakdown(ctx, "a", Range{t0, t0.Add(-time.Minute)}, ByRule); return err },
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

// Rows of several regions add up in every report, and a breakdown by
// region splits them: each region's deciders counted their own.
func TestBreakdownByRegion(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, region, allowed, rejected, shadow_rejected, dropped_rejections) VALUES
			('a', $1, 'free', 'r1', 'us-east', 10, 2, 0, 0),
			('a', $1, 'free', 'r1', 'eu-west', 4, 6, 0, 0),
			('a', $1 + interval '2 hours', 'free', 'r1', 'eu-west', 1, 1, 0, 0),
			('a', $1 + interval '5 minutes', 'pro', 'r3', '', 7, 0, 0, 0)`, t0); err != nil {
		t.Fatal(err)
	}
	s := New(pool)
	r := Range{t0, t0.Add(3 * time.Hour)}
	regions, err := s.Breakdown(context.Background(), "a", r, ByRegion)
	want := []Row{{Region: "eu-west", Counts: Counts{Allowed: 5, Rejected: 7}}, {Region: "us-east", Counts: Counts{Allowed: 10, Rejected: 2}},
		{Region: "", Counts: Counts{Allowed: 7}}}
	if err != nil || !slices.Equal(regions, want) {
		t.Fatalf("by region %+v, %v; want %+v", regions, err, want)
	}
	rules, err := s.Breakdown(context.Background(), "a", r, ByRule)
	if err != nil || len(rules) != 2 || rules[0].RuleID != "r1" || rules[0].Allowed != 15 || rules[0].Rejected != 9 {
		t.Fatalf("by rule %+v, %v: want r1's regions summed", rules, err)
	}
	if got := BreakdownCSV(regions, ByRegion); !strings.HasPrefix(got, "region,allowed,rejected,shadow_rejected,dropped_rejections\neu-west,5,7,0,0\nus-east,10,2,0,0\n,7,0,0,0\n") {
		t.Fatalf("by region CSV:\n%s", got)
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
	rows, err := s.Breakdown(context.Background(), "a", r, ByRule)
	if err != nil || len(rows) != 3 || rows[0].RuleID != "r2" || rows[0].ShadowRejected != 3 {
		t.Fatalf("by rule %+v, %v", rows, err)
	}
	tiers, err := s.Breakdown(context.Background(), "a", r, ByTier)
	if err != nil || len(tiers) != 2 || tiers[0].Tier != "free" || tiers[0].Allowed != 15 {
		t.Fatalf("by tier %+v, %v", tiers, err)
	}
	csv := TopClientsCSV(top)
	if !strings.Contains(csv, "\n'=cmd(),r2,,1,0\n") {
		t.Fatalf("a formula-like client key was not defused:\n%s", csv)
	}
	if got := BreakdownCSV(tiers, ByTier); !strings.HasPrefix(got, "tier,allowed,rejected,shadow_rejected,dropped_rejections\nfree,15,3,3,0\n") {
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

		rows, err := s.Breakdown(ctx, "a", r, ByRule)
		if err != nil || len(rows) != len(byRule) {
			t.Fatalf("%s: by rule %+v, %v; want %+v", name, rows, err, byRule)
		}
		for _, x := range rows {
			if x.Counts != byRule[[2]string{x.RuleID, x.Tier}] {
				t.Fatalf("%s: %s/%s %+v, want %+v", name, x.Tier, x.RuleID, x.Counts, byRule[[2]string{x.RuleID, x.Tier}])
			}
		}
		tiers, err := s.Breakdown(ctx, "a", r, ByTier)
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

// Top clients read whole days from their sums where the days were summed
// (which a trigger keeps as their hours are written, rewritten and
// deleted after) and the rest from the hours: over random ranges and
// rules, every answer is the one counted from the hours alone, before and
// after some hours' rows changed or went and two more days were summed,
// and after analytics pruned the hours of two and a bit days: then the
// days the range cuts where the hours are gone count whole.
func TestTopClientsOfDaysAndHoursMatchTheHours(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	hoursFrom := base.Add(2*24*time.Hour + 5*time.Hour)
	type key struct {
		tenant, rule string
		hour         time.Time
		client       string
	}
	type sums struct{ rejected, error int64 }
	hours := map[key]sums{}
	// Two of the five days summed before their hours are written.
	if _, err := pool.Exec(ctx, `UPDATE analytics_top_clients_days SET until = $1`, base.Add(2*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	write := func() {
		var cols [6][]any
		for k, v := range hours {
			for i, x := range []any{k.tenant, k.rule, k.hour, k.client, v.rejected, v.error} {
				cols[i] = append(cols[i], x)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO analytics_top_clients AS t (tenant_id, rule_id, hour, client_key, rejected, error)
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bigint[], $6::bigint[])
			ON CONFLICT (tenant_id, rule_id, hour, client_key) DO UPDATE SET rejected = excluded.rejected, error = excluded.error`,
			cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]); err != nil {
			t.Fatal(err)
		}
	}
	for h := range 5 * 24 {
		for _, tenant := range []string{"a", "b"} {
			for range 12 {
				k := key{tenant, fmt.Sprint("r", rng.IntN(3)), base.Add(time.Duration(h) * time.Hour), fmt.Sprintf("c%02d", rng.IntN(30))}
				e := rng.Int64N(3)
				hours[k] = sums{e + 1 + rng.Int64N(20), e}
			}
		}
	}
	write()
	s := New(pool)
	for i := range 80 {
		if i == 40 { // some clients evicted, some counted further
			var gone []any
			for k, v := range hours {
				switch rng.IntN(4) {
				case 0:
					delete(hours, k)
					gone = append(gone, k.tenant, k.rule, k.hour, k.client)
				case 1:
					hours[k] = sums{v.rejected + 5, v.error + 1}
				}
			}
			for len(gone) > 0 { // in statements of up to 1000 rows
				n := min(len(gone), 4000)
				var tenants, rules, clients []string
				var at []time.Time
				for j := 0; j < n; j += 4 {
					tenants, rules, at, clients = append(tenants, gone[j].(string)), append(rules, gone[j+1].(string)), append(at, gone[j+2].(time.Time)), append(clients, gone[j+3].(string))
				}
				if _, err := pool.Exec(ctx, `DELETE FROM analytics_top_clients t
					USING unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS g (tenant_id, rule_id, hour, client_key)
					WHERE (t.tenant_id, t.rule_id, t.hour, t.client_key) = (g.tenant_id, g.rule_id, g.hour, g.client_key)`,
					tenants, rules, at, clients); err != nil {
					t.Fatal(err)
				}
				gone = gone[n:]
			}
			write()
			if days, err := analytics.NewStore(pool, 0).SumDays(ctx, base.Add(4*24*time.Hour+time.Hour)); err != nil || days != 2 {
				t.Fatalf("summed %d days, %v; want 2", days, err)
			}
		}
		if i == 60 {
			if _, err := analytics.NewStore(pool, 0).Prune(ctx, hoursFrom, base.Add(-24*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		from := base.Add(time.Duration(rng.IntN(4*24*60)) * time.Minute)
		if i%3 == 0 {
			from = from.Truncate(24 * time.Hour)
		}
		r := Range{from, from.Add(time.Duration(1+rng.IntN(3*24*60)) * time.Minute)}
		rule := ""
		if i%4 == 1 {
			rule = "r1"
		}
		name := fmt.Sprintf("%s+%v rule %q", r.From.Format("02 15:04"), r.To.Sub(r.From), rule)
		got, err := s.TopClients(ctx, "a", r, rule, MaxTopLimit)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The hours counted: those the range touches, and after the
		// pruning all of the days in which it touches hours gone.
		first, end := r.From.Truncate(time.Hour), r.To.Add(time.Hour-time.Nanosecond).Truncate(time.Hour)
		if i >= 60 && first.Before(hoursFrom) {
			first = first.Truncate(24 * time.Hour)
			if day := end.Truncate(24 * time.Hour); day.Before(hoursFrom) && day.Before(end) {
				end = day.Add(24 * time.Hour)
			}
		}
		want := map[[2]string]sums{}
		for k, v := range hours {
			if k.tenant == "a" && (rule == "" || k.rule == rule) && !k.hour.Before(first) && k.hour.Before(end) {
				w := want[[2]string{k.client, k.rule}]
				want[[2]string{k.client, k.rule}] = sums{w.rejected + v.rejected, w.error + v.error}
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d clients, want %d", name, len(got), len(want))
		}
		for j, c := range got {
			if w := want[[2]string{c.ClientKey, c.RuleID}]; (sums{c.Rejected, c.Error}) != w {
				t.Fatalf("%s: %s of %s: %d (error %d), want %d (error %d)", name, c.ClientKey, c.RuleID, c.Rejected, c.Error, w.rejected, w.error)
			}
			if j > 0 && got[j-1].Rejected < c.Rejected {
				t.Fatalf("%s: %s before %s, with fewer rejections", name, got[j-1].ClientKey, c.ClientKey)
			}
		}
	}
}

// Without the mark of the days summed (a row deleted by hand), top clients
// come from the hours alone: the days' sums are no longer kept.
func TestTopClientsWithoutTheDaysMarkReadTheHours(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	day := t0.Truncate(24 * time.Hour)
	if _, err := pool.Exec(ctx, `UPDATE analytics_top_clients_days SET until = $1`, day.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	add := `INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected) VALUES ('a', 'r1', $1, 'alice', 3)
		ON CONFLICT (tenant_id, rule_id, hour, client_key) DO UPDATE SET rejected = analytics_top_clients.rejected + 3`
	if _, err := pool.Exec(ctx, add, t0); err != nil { // summed into its day
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM analytics_top_clients_days`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, add, t0.Add(time.Hour)); err != nil { // not: the trigger sees no mark
		t.Fatal(err)
	}
	top, err := New(pool).TopClients(ctx, "a", Range{day, day.Add(24 * time.Hour)}, "", 0)
	if err != nil || len(top) != 1 || top[0].Rejected != 6 {
		t.Fatalf("top clients %+v, %v; want alice with 6", top, err)
	}
}

// Rejections by a client's block override, which is no rule of the
// tenant's, are named for what it blocks in top clients and breakdowns; a
// rule deleted since has no name.
func TestABlocksRejectionsAreNamed(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, rejected) VALUES
			('a', $1, 'free', 'block/client_id=mallory', 4), ('a', $1, 'free', 'gone', 1)`, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected) VALUES
			('a', 'block/client_id=mallory', $1, 'mallory', 4)`, t0); err != nil {
		t.Fatal(err)
	}
	s := New(pool)
	r := Range{t0, t0.Add(time.Hour)}
	top, err := s.TopClients(ctx, "a", r, "", 0)
	if err != nil || len(top) != 1 || top[0].RuleName != "blocked (client_id=mallory)" {
		t.Fatalf("top clients %+v, %v", top, err)
	}
	rows, err := s.Breakdown(ctx, "a", r, ByRule)
	if err != nil || len(rows) != 2 || rows[0].RuleName != "blocked (client_id=mallory)" || rows[1].RuleID != "gone" || rows[1].RuleName != "" {
		t.Fatalf("by rule %+v, %v", rows, err)
	}
}
