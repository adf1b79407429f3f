package reports

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// Rollups of a month of a busy tenant: 3 tiers of 5 rules, each with
// decisions every minute, and 100 top clients per rule and hour (the
// analytics consumer's default), beside another tenant's as many.
const (
	benchDays    = 30
	benchTiers   = 3
	benchRules   = 5
	benchClients = 100
)

var benchEnd = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func seedMonth(b testing.TB, pool *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	from := benchEnd.Add(-benchDays * 24 * time.Hour)
	// Seeded without the trigger that sums each minute into its hour, and
	// summed at the end, in a few seconds rather than a minute.
	if _, err := pool.Exec(ctx, `ALTER TABLE analytics_minute DISABLE TRIGGER analytics_minute_to_hour`); err != nil {
		b.Fatal(err)
	}
	for _, tenant := range []string{"a", "b"} {
		if _, err := pool.Exec(ctx, `
			INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed, rejected, shadow_rejected)
			SELECT $1, m, 'tier-' || t, 'rule-' || t || '-' || r, 100, (extract(minute FROM m)::int + r) % 7, r % 2
			FROM generate_series($2::timestamptz, $3::timestamptz - interval '1 minute', interval '1 minute') m,
				generate_series(1, $4::int) t, generate_series(1, $5::int) r`,
			tenant, from, benchEnd, benchTiers, benchRules); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected)
			SELECT $1, 'rule-' || t || '-' || r, h, 'client-' || c, 1 + (c * 7 + extract(hour FROM h)::int) % 50
			FROM generate_series($2::timestamptz, $3::timestamptz - interval '1 hour', interval '1 hour') h,
				generate_series(1, $4::int) t, generate_series(1, $5::int) r, generate_series(1, $6::int) c`,
			tenant, from, benchEnd, benchTiers, benchRules, benchClients); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE analytics_minute ENABLE TRIGGER analytics_minute_to_hour;
		INSERT INTO analytics_hour (tenant_id, hour, tier, rule_id, allowed, rejected, shadow_rejected)
		SELECT tenant_id, date_bin('1 hour', minute, 'epoch'), tier, rule_id, sum(allowed), sum(rejected), sum(shadow_rejected)
		FROM analytics_minute GROUP BY 1, 2, 3, 4`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE analytics_minute; ANALYZE analytics_hour; ANALYZE analytics_top_clients`); err != nil {
		b.Fatal(err)
	}
}

// seedDaysBefore stores the top clients of the 335 days before
// seedMonth's month by the day alone, as analytics keeps them once their
// hours are pruned (migration 29): the same clients every day.
func seedDaysBefore(b testing.TB, pool *pgxpool.Pool) {
	b.Helper()
	from := benchEnd.Add(-benchDays * 24 * time.Hour)
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO analytics_top_clients_day (tenant_id, rule_id, day, client_key, rejected, error)
		SELECT tn, 'rule-' || t || '-' || r, d, 'client-' || c, 24 * (1 + c % 50), 0
		FROM unnest(array['a', 'b']) tn,
			generate_series($1::timestamptz - interval '335 days', $1::timestamptz - interval '1 day', interval '1 day') d,
			generate_series(1, $2::int) t, generate_series(1, $3::int) r, generate_series(1, $4::int) c`,
		from, benchTiers, benchRules, benchClients); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE analytics_top_clients_days SET hours_from = $1`, from); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE analytics_top_clients_day`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReports times the dashboard's queries over the last day, week
// and month of seedMonth's rollups: the time series (in 60 steps, and over
// days in the console's steps of whole hours), the breakdown by rule and
// the top clients; and the top clients over the last quarter and year,
// whose days before the month are kept by the day (seedDaysBefore).
func BenchmarkReports(b *testing.B) {
	pool := pgtest.Pool(b)
	seedMonth(b, pool)
	seedDaysBefore(b, pool)
	s := New(pool)
	ctx := context.Background()
	for _, span := range []struct {
		name string
		d    time.Duration
	}{{"day", 24 * time.Hour}, {"week", 7 * 24 * time.Hour}, {"month", benchDays * 24 * time.Hour}} {
		r := Range{benchEnd.Add(-span.d), benchEnd}
		step := span.d / 60
		b.Run(fmt.Sprintf("timeseries/%s", span.name), func(b *testing.B) {
			for b.Loop() {
				if p, err := s.Timeseries(ctx, "a", r, step, "", ""); err != nil || len(p) != 60 {
					b.Fatalf("%d points, %v", len(p), err)
				}
			}
		})
		if span.d >= 2*24*time.Hour { // the console's steps over days: whole hours
			hourly := (step + time.Hour - 1) / time.Hour * time.Hour
			b.Run(fmt.Sprintf("timeseries-hours/%s", span.name), func(b *testing.B) {
				for b.Loop() {
					if p, err := s.Timeseries(ctx, "a", r, hourly, "", ""); err != nil || len(p) == 0 {
						b.Fatalf("%d points, %v", len(p), err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("breakdown/%s", span.name), func(b *testing.B) {
			for b.Loop() {
				if rows, err := s.Breakdown(ctx, "a", r, ByRule); err != nil || len(rows) != benchTiers*benchRules {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
		benchTopClients(b, s, span.name, r)
	}
	for _, span := range []struct {
		name string
		days int
	}{{"quarter", 90}, {"year", 365}} {
		// From the console's whole hour, which cuts a day whose hours are gone.
		benchTopClients(b, s, span.name, Range{benchEnd.Add(-time.Duration(span.days)*24*time.Hour + 13*time.Hour), benchEnd})
	}
}

func benchTopClients(b *testing.B, s *Store, name string, r Range) {
	b.Run("top-clients/"+name, func(b *testing.B) {
		for b.Loop() {
			if top, err := s.TopClients(context.Background(), "a", r, "", DefaultTopLimit); err != nil || len(top) != DefaultTopLimit {
				b.Fatalf("%d clients, %v", len(top), err)
			}
		}
	})
}
