// Package reports answers questions about decisions from the analytics
// rollups (see internal/analytics): decisions over time, the most rejected
// clients, breakdowns by rule and tier, and CSV exports of each.
package reports

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
)

// Bounds of a query.
const (
	MaxRange        = 400 * 24 * time.Hour
	MaxPoints       = 10_000
	DefaultTopLimit = 10
	MaxTopLimit     = 1000
)

// Store reads the rollup tables.
type Store struct{ pool *pgxpool.Pool }

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Range is a half-open time range [From, To).
type Range struct{ From, To time.Time }

// Counts are decision counts over some period.
type Counts struct{ Allowed, Rejected, ShadowRejected, DroppedRejections int64 }

// Point is one step of a time series.
type Point struct {
	Start time.Time
	Counts
}

// TopClient is one of the most rejected clients of a rule; Rejected may
// over-count by at most Error.
type TopClient struct {
	ClientKey, RuleID, RuleName string
	Rejected, Error             int64
}

// Row is one line of a breakdown: per rule (RuleID, RuleName, Tier) or per
// tier (Tier only).
type Row struct {
	RuleID, RuleName, Tier, Region string
	Counts
}

// By is what a breakdown's rows are of.
type By uint8

const (
	ByRule   By = iota // a rule and its tier
	ByTier             // a tier
	ByRegion           // the region of the deciders that counted them ('' for those that name none)
)

// validate checks a range and returns it with From truncated to its
// minute and To rounded up to one.
func (r Range) validate(fields *[]policy.FieldError) Range {
	switch {
	case r.From.IsZero():
		*fields = append(*fields, policy.FieldError{Field: "from", Description: "required"})
	case r.To.IsZero():
		*fields = append(*fields, policy.FieldError{Field: "to", Description: "required"})
	case !r.To.After(r.From):
		*fields = append(*fields, policy.FieldError{Field: "to", Description: "must be after from"})
	case r.To.Sub(r.From) > MaxRange:
		*fields = append(*fields, policy.FieldError{Field: "to", Description: fmt.Sprintf("the range may span at most %d days", MaxRange/(24*time.Hour))})
	}
	from := r.From.UTC().Truncate(time.Minute)
	to := r.To.UTC().Truncate(time.Minute)
	if to.Before(r.To) {
		to = to.Add(time.Minute)
	}
	return Range{from, to}
}

func invalid(fields []policy.FieldError) error {
	if len(fields) == 0 {
		return nil
	}
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid report request", Fields: fields}
}

// Timeseries answers the counts of every step of r (empty steps
// included), optionally for one rule or tier. Steps start at r.From
// truncated to its minute; step is a whole number of minutes.
func (s *Store) Timeseries(ctx context.Context, tenant string, r Range, step time.Duration, rule, tier string) ([]Point, error) {
	var fields []policy.FieldError
	r = r.validate(&fields)
	switch {
	case step <= 0 || step%time.Minute != 0:
		fields = append(fields, policy.FieldError{Field: "step", Description: "must be a positive whole number of minutes"})
	case len(fields) == 0 && r.To.Sub(r.From)/step > MaxPoints:
		fields = append(fields, policy.FieldError{Field: "step", Description: fmt.Sprintf("too small for the range: at most %d points", MaxPoints)})
	}
	if err := invalid(fields); err != nil {
		return nil, err
	}
	n := int((r.To.Sub(r.From) + step - 1) / step)
	points := make([]Point, n)
	for i := range points {
		points[i].Start = r.From.Add(time.Duration(i) * step)
	}
	hours, minutes, cut := split(r, step)
	var i int
	var c Counts
	err := s.read(ctx, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&i, &c.Allowed, &c.Rejected, &c.ShadowRejected, &c.DroppedRejections}, func() error {
			if i >= 0 && i < n {
				points[i].Counts = c
			}
			return nil
		})
		return err
	}, `SELECT floor(extract(epoch FROM x.at - $2::timestamptz) / $3)::int,
			sum(x.allowed), sum(x.rejected), sum(x.shadow_rejected), sum(x.dropped_rejections)
		FROM `+rollups(4)+` x
		WHERE ($9 = '' OR x.rule_id = $9) AND ($10 = '' OR x.tier = $10)
		GROUP BY 1`, append(append([]any{tenant, r.From, step.Seconds()}, spanArgs(hours, minutes, cut)...), rule, tier)...)
	if err != nil {
		return nil, fmt.Errorf("reports: timeseries: %w", err)
	}
	return points, nil
}

// TopClients answers the most rejected clients over the hours r touches,
// optionally of one rule, most rejected first.
func (s *Store) TopClients(ctx context.Context, tenant string, r Range, rule string, limit int) ([]TopClient, error) {
	var fields []policy.FieldError
	r = r.validate(&fields)
	if limit == 0 {
		limit = DefaultTopLimit
	}
	if limit < 1 || limit > MaxTopLimit {
		fields = append(fields, policy.FieldError{Field: "limit", Description: fmt.Sprintf("must be from 1 to %d", MaxTopLimit)})
	}
	if err := invalid(fields); err != nil {
		return nil, err
	}
	// Whole days from their sums (migration 27) where they are summed, the
	// hours before and after them from the hours' rows; the rules' names
	// are looked up for the answer's rows only. Where the hours are pruned
	// (before hours_from, migration 29), the days that the range cuts
	// count whole, as the hours that a range older than the minutes cuts
	// do in Timeseries.
	hours := span{r.From.Truncate(time.Hour), r.To.Add(time.Hour - time.Nanosecond).Truncate(time.Hour)}
	days := span{hours.from.Add(24*time.Hour - time.Nanosecond).Truncate(24 * time.Hour), hours.to.Truncate(24 * time.Hour)}
	var out []TopClient
	err := s.read(ctx, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (c TopClient, err error) {
			err = row.Scan(&c.ClientKey, &c.RuleID, &c.RuleName, &c.Rejected, &c.Error)
			return c, err
		})
		return err
	}, `SELECT t.client_key, t.rule_id, `+ruleName("t")+`, t.rejected, t.error
		FROM (SELECT client_key, rule_id, sum(rejected) AS rejected, sum(error) AS error
			FROM (SELECT lo, greatest(lo, least(hi, until)) AS until
					FROM (SELECT CASE WHEN $2 < m.hours_from THEN $8::timestamptz ELSE $3::timestamptz END AS lo,
							CASE WHEN $6 < m.hours_from AND $6 < $7 THEN $6::timestamptz + interval '24 hours' ELSE $6::timestamptz END AS hi,
							m.until
						FROM (SELECT coalesce(max(until), '-infinity') AS until, coalesce(max(hours_from), '-infinity') AS hours_from
							FROM analytics_top_clients_days) m) b) s,
				LATERAL (SELECT client_key, rule_id, rejected, error FROM analytics_top_clients
						WHERE tenant_id = $1 AND ($4 = '' OR rule_id = $4)
							AND (hour >= $2 AND hour < least(s.lo, $7) OR hour >= s.until AND hour < $7)
					UNION ALL
					SELECT client_key, rule_id, rejected, error FROM analytics_top_clients_day
						WHERE tenant_id = $1 AND ($4 = '' OR rule_id = $4) AND day >= s.lo AND day < s.until) x
			GROUP BY client_key, rule_id
			ORDER BY sum(rejected) DESC, client_key, rule_id
			LIMIT $5) t
		LEFT JOIN rules r ON r.id::text = t.rule_id AND r.tenant_id::text = $1
		ORDER BY t.rejected DESC, t.client_key, t.rule_id`, tenant, hours.from, days.from, rule, limit, days.to, hours.to, hours.from.Truncate(24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("reports: top clients: %w", err)
	}
	return out, nil
}

// Breakdown answers the totals of r per rule, per tier or per region,
// the most rejected first.
func (s *Store) Breakdown(ctx context.Context, tenant string, r Range, by By) ([]Row, error) {
	var fields []policy.FieldError
	r = r.validate(&fields)
	if err := invalid(fields); err != nil {
		return nil, err
	}
	// The rules' names are looked up once per row of the answer.
	group, outer, name := "x.rule_id, x.tier", "g.rule_id, g.tier", ruleName("g")
	join := "LEFT JOIN rules r ON r.id::text = g.rule_id AND r.tenant_id::text = $1"
	switch by {
	case ByTier:
		group, outer, name, join = "x.tier", "g.tier", "''", ""
	case ByRegion:
		group, outer, name, join = "x.region", "g.region", "''", ""
	}
	hours, minutes, _ := split(r, r.To.Sub(r.From))
	var out []Row
	err := s.read(ctx, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (x Row, err error) {
			dest := []any{&x.RuleID, &x.Tier}
			switch by {
			case ByTier:
				dest = []any{&x.Tier}
			case ByRegion:
				dest = []any{&x.Region}
			}
			err = row.Scan(append(dest, &x.RuleName, &x.Allowed, &x.Rejected, &x.ShadowRejected, &x.DroppedRejections)...)
			return x, err
		})
		return err
	}, `SELECT `+outer+`, `+name+`, g.allowed, g.rejected, g.shadow_rejected, g.dropped_rejections
		FROM (SELECT `+group+`, sum(x.allowed) AS allowed, sum(x.rejected) AS rejected,
				sum(x.shadow_rejected) AS shadow_rejected, sum(x.dropped_rejections) AS dropped_rejections
			FROM `+rollups(2)+` x
			WHERE x.rule_id <> ''
			GROUP BY `+group+`) g `+join+`
		ORDER BY g.rejected + g.shadow_rejected DESC, `+outer,
		append([]any{tenant}, spanArgs(hours, minutes, nil)...)...)
	if err != nil {
		return nil, fmt.Errorf("reports: breakdown: %w", err)
	}
	return out, nil
}

// ruleName is the name of the rule of rows (an alias with a rule_id),
// joined as r: the rule's, or for a client's block override, which is no
// rule of the tenant's (its rows' rule_id is block/<descriptor>=<value>),
// "blocked (<descriptor>=<value>)"; empty for a rule deleted since.
func ruleName(rows string) string {
	return fmt.Sprintf(`coalesce(r.name, CASE WHEN %[1]s.rule_id LIKE 'block/%%' THEN 'blocked (' || substr(%[1]s.rule_id, 7) || ')' ELSE '' END)`, rows)
}

// read runs a query in a read-only transaction and hands its rows to
// scan. PostgreSQL cannot tell how few rows a report's spans (see
// rollups) hold, and planned for millions: JIT compilation and parallel
// workers, whose start took 100 ms of a week's time series whose rows took
// 15, and after five runs of a statement a generic plan that took 2.5 s.
// The transaction turns all three off (docs/benchmarks.md, "Reports").
// An outage of the database is policy.ErrDatabaseUnavailable.
func (s *Store) read(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		return scan(rows)
	})
	if pgstore.Unavailable(err) {
		return fmt.Errorf("%w: %w", policy.ErrDatabaseUnavailable, err)
	}
	return err
}

// rollups reads the rollup rows of a tenant ($1) over spans: whole hours
// from analytics_hour ($n and $n+1, the spans' starts and ends, for n =
// first), the rest from analytics_minute ($n+2 and $n+3), each row with
// its time as at. A report over weeks reads an hour's row where it would
// read sixty. Of the hours a step cuts ($n+4, their starts), read from
// their minutes, those whose minutes were pruned (the hours outlive them)
// count whole, at their start.
func rollups(first int) string {
	return fmt.Sprintf(`(
	SELECT h.hour AS at, h.tier, h.rule_id, h.region, h.allowed, h.rejected, h.shadow_rejected, h.dropped_rejections
	FROM unnest($%[1]d::timestamptz[], $%[2]d::timestamptz[]) AS s (f, t)
	JOIN analytics_hour h ON h.tenant_id = $1 AND h.hour >= s.f AND h.hour < s.t
	UNION ALL
	SELECT m.minute, m.tier, m.rule_id, m.region, m.allowed, m.rejected, m.shadow_rejected, m.dropped_rejections
	FROM unnest($%[3]d::timestamptz[], $%[4]d::timestamptz[]) AS s (f, t)
	JOIN analytics_minute m ON m.tenant_id = $1 AND m.minute >= s.f AND m.minute < s.t
	UNION ALL
	SELECT h.hour, h.tier, h.rule_id, h.region, h.allowed, h.rejected, h.shadow_rejected, h.dropped_rejections
	FROM (SELECT f FROM unnest($%[5]d::timestamptz[]) AS f WHERE NOT EXISTS (SELECT FROM analytics_minute m
		WHERE m.tenant_id = $1 AND m.minute >= f AND m.minute < f + interval '1 hour')) AS s
	JOIN analytics_hour h ON h.tenant_id = $1 AND h.hour = s.f)`,
		first, first+1, first+2, first+3, first+4)
}

// span is a half-open range of time.
type span struct{ from, to time.Time }

// spanArgs are rollups' arguments for hours, minutes and the hours cut.
func spanArgs(hours, minutes []span, cut []time.Time) []any {
	cols := func(spans []span) (from, to []time.Time) {
		from, to = []time.Time{}, []time.Time{}
		for _, s := range spans {
			from, to = append(from, s.from), append(to, s.to)
		}
		return from, to
	}
	hf, ht := cols(hours)
	mf, mt := cols(minutes)
	if cut == nil {
		cut = []time.Time{}
	}
	return []any{hf, ht, mf, mt, cut}
}

// split divides r, counted in steps of step from r.From, into the spans to
// read from the hourly rollups (whole hours, each within one step) and the
// spans to read from the minute ones (the rest), adjacent spans merged;
// cut are the starts of the whole hours that a step's end cuts.
func split(r Range, step time.Duration) (hours, minutes []span, cut []time.Time) {
	add := func(spans []span, from, to time.Time) []span {
		if !from.Before(to) {
			return spans
		}
		if n := len(spans); n > 0 && spans[n-1].to.Equal(from) {
			spans[n-1].to = to
			return spans
		}
		return append(spans, span{from, to})
	}
	bucket := func(t time.Time) time.Duration { return t.Sub(r.From) / step }
	h := r.From.Truncate(time.Hour)
	if h.Before(r.From) {
		h = h.Add(time.Hour)
	}
	minutes = add(minutes, r.From, earlier(h, r.To))
	for ; !h.Add(time.Hour).After(r.To); h = h.Add(time.Hour) {
		if bucket(h) == bucket(h.Add(time.Hour-time.Minute)) {
			hours = add(hours, h, h.Add(time.Hour))
		} else {
			minutes = add(minutes, h, h.Add(time.Hour))
			cut = append(cut, h)
		}
	}
	minutes = add(minutes, h, r.To)
	return hours, minutes, cut
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
