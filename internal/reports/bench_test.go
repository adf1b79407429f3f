package reports

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
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

// BenchmarkReports times the dashboard's queries over the last day, week
// and month of seedMonth's rollups: the time series (in 60 steps, and over
// days in the console's steps of whole hours), the breakdown by rule and
// the top clients.
func BenchmarkReports(b *testing.B) {
	pool := pgtest.Pool(b)
	seedMonth(b, pool)
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
				if rows, err := s.Breakdown(ctx, "a", r, false); err != nil || len(rows) != benchTiers*benchRules {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
		b.Run(fmt.Sprintf("top-clients/%s", span.name), func(b *testing.B) {
			for b.Loop() {
				if top, err := s.TopClients(ctx, "a", r, "", DefaultTopLimit); err != nil || len(top) != DefaultTopLimit {
					b.Fatalf("%d clients, %v", len(top), err)
				}
			}
		})
	}
}
