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
	RuleID, RuleName, Tier string
	Counts
}

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
		fields = append(fields, policy.FieldError{Field: "step", Description: "must be a whole number of minutes"})
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
	rows, err := s.pool.Query(ctx, `SELECT floor(extract(epoch FROM minute - $2::timestamptz) / $4)::int,
			sum(allowed), sum(rejected), sum(shadow_rejected), sum(dropped_rejections)
		FROM analytics_minute
		WHERE tenant_id = $1 AND minute >= $2 AND minute < $3 AND ($5 = '' OR rule_id = $5) AND ($6 = '' OR tier = $6)
		GROUP BY 1`, tenant, r.From, r.To, step.Seconds(), rule, tier)
	if err != nil {
		return nil, fmt.Errorf("reports: timeseries: %w", err)
	}
	var i int
	var c Counts
	_, err = pgx.ForEachRow(rows, []any{&i, &c.Allowed, &c.Rejected, &c.ShadowRejected, &c.DroppedRejections}, func() error {
		if i >= 0 && i < n {
			points[i].Counts = c
		}
		return nil
	})
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
	rows, err := s.pool.Query(ctx, `SELECT t.client_key, t.rule_id, coalesce(min(r.name), ''), sum(t.rejected), sum(t.error)
		FROM analytics_top_clients t LEFT JOIN rules r ON r.id::text = t.rule_id AND r.tenant_id::text = t.tenant_id
		WHERE t.tenant_id = $1 AND t.hour >= date_bin('1 hour', $2::timestamptz, 'epoch') AND t.hour < $3
			AND ($4 = '' OR t.rule_id = $4)
		GROUP BY t.client_key, t.rule_id
		ORDER BY sum(t.rejected) DESC, t.client_key, t.rule_id
		LIMIT $5`, tenant, r.From, r.To, rule, limit)
	if err != nil {
		return nil, fmt.Errorf("reports: top clients: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (c TopClient, err error) {
		err = row.Scan(&c.ClientKey, &c.RuleID, &c.RuleName, &c.Rejected, &c.Error)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("reports: top clients: %w", err)
	}
	return out, nil
}

// Breakdown answers the totals of r per rule (byTier false) or per tier,
// most rejected first.
func (s *Store) Breakdown(ctx context.Context, tenant string, r Range, byTier bool) ([]Row, error) {
	var fields []policy.FieldError
	r = r.validate(&fields)
	if err := invalid(fields); err != nil {
		return nil, err
	}
	group := "m.rule_id, m.tier"
	if byTier {
		group = "m.tier"
	}
	rows, err := s.pool.Query(ctx, `SELECT `+group+`, coalesce(min(r.name), ''),
			sum(m.allowed), sum(m.rejected), sum(m.shadow_rejected), sum(m.dropped_rejections)
		FROM analytics_minute m LEFT JOIN rules r ON NOT $4 AND r.id::text = m.rule_id AND r.tenant_id::text = m.tenant_id
		WHERE m.tenant_id = $1 AND m.minute >= $2 AND m.minute < $3 AND m.rule_id <> ''
		GROUP BY `+group+`
		ORDER BY sum(m.rejected) + sum(m.shadow_rejected) DESC, `+group, tenant, r.From, r.To, byTier)
	if err != nil {
		return nil, fmt.Errorf("reports: breakdown: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (x Row, err error) {
		dest := []any{&x.RuleID, &x.Tier}
		if byTier {
			dest = []any{&x.Tier}
		}
		err = row.Scan(append(dest, &x.RuleName, &x.Allowed, &x.Rejected, &x.ShadowRejected, &x.DroppedRejections)...)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("reports: breakdown: %w", err)
	}
	return out, nil
}
