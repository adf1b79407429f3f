package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

// Every query below is scoped by tenant_id: a key of one tenant can name
// another tenant's ids and still reach nothing.

// CreateTier adds an empty tier called name to the tenant.
func (s *Store) CreateTier(ctx context.Context, actor policy.Actor, tenantID, name string) (policy.Tier, int64, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return policy.Tier{}, 0, err
	}
	t := policy.Tier{Name: name}
	if err := t.Validate(); err != nil {
		return policy.Tier{}, 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		if err := belowLimit(ctx, tx, `SELECT count(*) FROM tiers WHERE tenant_id = $1`, tenantID, policy.MaxTiers, "tiers"); err != nil {
			return change{}, err
		}
		err := tx.QueryRow(ctx, `INSERT INTO tiers (tenant_id, name) VALUES ($1, $2) RETURNING id::text`, tenantID, name).Scan(&t.ID)
		if err != nil {
			return change{}, translate(err, "tier")
		}
		return change{tenantID: tenantID, action: "create", resource: "tier", resourceID: t.ID, new: t}, nil
	})
	return t, version, err
}

// ListTiers returns the tenant's tiers with their rules in order.
func (s *Store) ListTiers(ctx context.Context, tenantID string) ([]policy.Tier, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, err
	}
	return listTiers(ctx, s.db, tenantID)
}

// querier is what listTiers needs of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func listTiers(ctx context.Context, q querier, tenantID string) ([]policy.Tier, error) {
	rows, err := q.Query(ctx, `SELECT id::text, name FROM tiers WHERE tenant_id = $1 ORDER BY name`, tenantID)
	if err != nil {
		return nil, translate(err, "tier")
	}
	tiers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Tier, error) {
		var t policy.Tier
		return t, r.Scan(&t.ID, &t.Name)
	})
	if err != nil {
		return nil, translate(err, "tier")
	}
	rules, err := listRules(ctx, q, tenantID, "")
	if err != nil {
		return nil, err
	}
	for i := range tiers {
		for _, r := range rules {
			if r.tierID == tiers[i].ID {
				tiers[i].Rules = append(tiers[i].Rules, r.Rule)
			}
		}
	}
	return tiers, nil
}

// DeleteTier deletes a tier and its rules; the tenant's default tier
// cannot be deleted.
func (s *Store) DeleteTier(ctx context.Context, actor policy.Actor, tenantID, tierID string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", tierID, "tier"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		// Locks, the tier's then the tenant's (the order of every change:
		// the version bump locks the tenant last): an override being given
		// this tier holds a share lock of it, and UpdateTenant the tenant's,
		// so that what is read below is what they committed.
		var name, defaultTier string
		err := tx.QueryRow(ctx, `SELECT name FROM tiers WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, tierID, tenantID).Scan(&name)
		if err != nil {
			return change{}, translate(err, "tier")
		}
		if err := tx.QueryRow(ctx, `SELECT default_tier FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&defaultTier); err != nil {
			return change{}, translate(err, "tenant")
		}
		if name == defaultTier {
			return change{}, policy.Errorf(policy.CodeFailedPrecondition, "tier %s is the tenant's default tier; make another the default first", name)
		}
		var moved int
		var some []string
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce((array_agg(identifier ORDER BY identifier))[1:3], '{}')
			FROM overrides WHERE tenant_id = $1 AND tier_name = $2`, tenantID, name).Scan(&moved, &some); err != nil {
			return change{}, translate(err, "tier")
		}
		if moved > 0 {
			return change{}, policy.Errorf(policy.CodeFailedPrecondition, "tier %s is the tier of %d override(s) (%s): delete them or move their clients first, or their checks would name a tier that is gone",
				name, moved, strings.Join(some, ", ")+map[bool]string{true: ", …", false: ""}[moved > len(some)])
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tiers WHERE id = $1 AND tenant_id = $2`, tierID, tenantID); err != nil {
			return change{}, translate(err, "tier")
		}
		return change{tenantID: tenantID, action: "delete", resource: "tier", resourceID: tierID,
			old: policy.Tier{ID: tierID, Name: name}}, nil
	})
	return version, err
}

// RenameTier renames the tier tierID to name, in one config version, and
// with it the overrides that move clients to it and the tenant's default
// tier when it is this one, so that nothing names the old name after.
func (s *Store) RenameTier(ctx context.Context, actor policy.Actor, tenantID, tierID, name string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", tierID, "tier"); err != nil {
		return 0, err
	}
	t := policy.Tier{Name: name}
	if err := t.Validate(); err != nil {
		return 0, err
	}
	return s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		var old string
		if err := tx.QueryRow(ctx, `SELECT name FROM tiers WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, tierID, tenantID).Scan(&old); err != nil {
			return change{}, translate(err, "tier")
		}
		if _, err := tx.Exec(ctx, `UPDATE tiers SET name = $3 WHERE id = $1 AND tenant_id = $2`, tierID, tenantID, name); err != nil {
			return change{}, translate(err, "tier")
		}
		if _, err := tx.Exec(ctx, `UPDATE overrides SET tier_name = $3 WHERE tenant_id = $1 AND tier_name = $2`, tenantID, old, name); err != nil {
			return change{}, translate(err, "tier")
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET default_tier = $3 WHERE id = $1 AND default_tier = $2`, tenantID, old, name); err != nil {
			return change{}, translate(err, "tier")
		}
		return change{tenantID: tenantID, action: "update", resource: "tier", resourceID: tierID,
			old: policy.Tier{ID: tierID, Name: old}, new: policy.Tier{ID: tierID, Name: name}}, nil
	})
}

// matchJSON is the stored form of a rule's match.
type matchJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// partitionJSON is a policy.Partition as the partitions column keeps it.
type partitionJSON struct {
	Value string  `json:"value"`
	Share float64 `json:"share"`
}

const ruleColumns = `id::text, tier_id::text, name, match, key_by, algorithm, lim, window_us, burst, warm_up_us,
	cold_factor, max_delay_us, granularity_us, lease_ttl_us, shadow, failure_mode, enabled, sync_us, exact, block, replaces, calendar, time_zone, message, quota, scope, floor, adaptation, partition_by, partitions`

// storedRule is a rule with the tier holding it.
type storedRule struct {
	policy.Rule
	tierID string
}

func scanRule(row pgx.Row) (storedRule, error) {
	var r storedRule
	var match []matchJSON
	var parts []partitionJSON
	var alg, mode, cal, scope, adapt string
	var window, warm, delay, gran, ttl, sync int64
	err := row.Scan(&r.ID, &r.tierID, &r.Name, &match, &r.KeyBy, &alg, &r.Limit, &window, &r.Burst, &warm,
		&r.ColdFactor, &delay, &gran, &ttl, &r.Shadow, &mode, &r.Enabled, &sync, &r.Exact, &r.Block, &r.Replaces, &cal, &r.TimeZone, &r.Message, &r.Quota, &scope, &r.Floor, &adapt, &r.PartitionBy, &parts)
	if err != nil {
		return r, err
	}
	if len(r.Replaces) == 0 {
		r.Replaces = nil // as the rule was given
	}
	for _, m := range match {
		r.Match = append(r.Match, policy.Match{Key: m.Key, Value: m.Value})
	}
	r.Algorithm, _ = policy.ParseAlgorithm(alg) // the schema admits only known names
	r.FailureMode, _ = policy.ParseFailureMode(mode)
	r.Calendar, _ = policy.ParseCalendar(cal)
	r.Scope, _ = policy.ParseScope(scope)
	r.Adaptation, _ = policy.ParseAdaptation(adapt)
	for _, p := range parts {
		r.Partitions = append(r.Partitions, policy.Partition(p))
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	r.Window, r.WarmUp, r.MaxDelay, r.Granularity, r.LeaseTTL = us(window), us(warm), us(delay), us(gran), us(ttl)
	r.Sync = us(sync)
	return r, nil
}

// ruleArgs returns the column values of r after id, tier and position, in
// ruleColumns order.
func ruleArgs(r policy.Rule) ([]any, error) {
	match := make([]matchJSON, len(r.Match))
	for i, m := range r.Match {
		match[i] = matchJSON(m)
	}
	mj, err := json.Marshal(match)
	if err != nil {
		return nil, fmt.Errorf("pgstore: rule match: %w", err)
	}
	parts := make([]partitionJSON, len(r.Partitions))
	for i, p := range r.Partitions {
		parts[i] = partitionJSON(p)
	}
	pj, err := json.Marshal(parts)
	if err != nil {
		return nil, fmt.Errorf("pgstore: rule partitions: %w", err)
	}
	keyBy, replaces := r.KeyBy, r.Replaces
	if keyBy == nil {
		keyBy = []string{}
	}
	if replaces == nil {
		replaces = []string{}
	}
	return []any{r.Name, mj, keyBy, r.Algorithm.String(), r.Limit, r.Window.Microseconds(), r.Burst, r.WarmUp.Microseconds(),
		r.ColdFactor, r.MaxDelay.Microseconds(), r.Granularity.Microseconds(), r.LeaseTTL.Microseconds(), r.Shadow,
		r.FailureMode.String(), r.Enabled, r.Sync.Microseconds(), r.Exact, r.Block, replaces, r.Calendar.String(), r.TimeZone, r.Message, r.Quota, r.Scope.String(), r.Floor, r.Adaptation.String(), r.PartitionBy, pj}, nil
}

// listRules returns the tenant's rules (of one tier, unless tierID is ""),
// in tier order.
func listRules(ctx context.Context, q querier, tenantID, tierID string) ([]storedRule, error) {
	rows, err := q.Query(ctx, `SELECT `+ruleColumns+` FROM rules WHERE tenant_id = $1 AND ($2 = '' OR tier_id::text = $2)
		ORDER BY tier_id, position`, tenantID, tierID)
	if err != nil {
		return nil, translate(err, "rule")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedRule, error) { return scanRule(r) })
	return out, translate(err, "rule")
}

// ListRules returns a tier's rules in order; NotFound when the tenant has
// no such tier (a tier without rules is an empty list).
func (s *Store) ListRules(ctx context.Context, tenantID, tierID string) ([]policy.Rule, error) {
	if err := checkIDs(tenantID, "tenant", tierID, "tier"); err != nil {
		return nil, err
	}
	stored, err := listRules(ctx, s.db, tenantID, tierID)
	if err == nil && len(stored) == 0 {
		var ok bool
		err = s.db.QueryRow(ctx, `SELECT true FROM tiers WHERE tenant_id = $1 AND id = $2`, tenantID, tierID).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, policy.Errorf(policy.CodeNotFound, "tier not found")
		}
		if err != nil {
			return nil, translate(err, "tier")
		}
	}
	out := make([]policy.Rule, len(stored))
	for i, r := range stored {
		out[i] = r.Rule
	}
	return out, err
}

// CreateRule appends r to the tier and returns it with its id.
func (s *Store) CreateRule(ctx context.Context, actor policy.Actor, tenantID, tierID string, r policy.Rule) (policy.Rule, int64, error) {
	r.ID = ""
	if err := required(r.Validate(), "tier_id", tierID); err != nil {
		return r, 0, err
	}
	if err := checkIDs(tenantID, "tenant", tierID, "tier"); err != nil {
		return r, 0, err
	}
	args, err := ruleArgs(r)
	if err != nil {
		return r, 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		// The tier's row lock orders concurrent appends to one tier. The
		// count must be a statement of its own: in READ COMMITTED, one in
		// the locking statement would see the snapshot from before the wait.
		var n int
		err := tx.QueryRow(ctx, `SELECT 0 FROM tiers WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, tierID, tenantID).Scan(&n)
		if err != nil {
			return change{}, translate(err, "tier")
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM rules WHERE tier_id = $1`, tierID).Scan(&n); err != nil {
			return change{}, translate(err, "rule")
		}
		if n >= policy.MaxRulesPerTier {
			return change{}, policy.Errorf(policy.CodeResourceExhausted, "a tier holds at most %d rules", policy.MaxRulesPerTier)
		}
		err = tx.QueryRow(ctx, `INSERT INTO rules (tenant_id, tier_id, position, name, match, key_by, algorithm, lim, window_us,
			burst, warm_up_us, cold_factor, max_delay_us, granularity_us, lease_ttl_us, shadow, failure_mode, enabled, sync_us, exact, block, replaces, calendar, time_zone, message, quota, scope, floor, adaptation, partition_by, partitions)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31) RETURNING id::text`,
			append([]any{tenantID, tierID, n}, args...)...).Scan(&r.ID)
		if err != nil {
			return change{}, translate(err, "rule")
		}
		return change{tenantID: tenantID, action: "create", resource: "rule", resourceID: r.ID, new: r}, nil
	})
	return r, version, err
}

// UpdateRule replaces the rule r.ID (its tier and position stay). When
// ifMatch is not empty, the update is refused with policy.CodeAborted unless
// the rule's etag (policy.Rule.ETag) is still ifMatch.
func (s *Store) UpdateRule(ctx context.Context, actor policy.Actor, tenantID string, r policy.Rule, ifMatch string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", r.ID, "rule"); err != nil {
		return 0, err
	}
	if err := r.Validate(); err != nil {
		return 0, err
	}
	args, err := ruleArgs(r)
	if err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		old, err := scanRule(tx.QueryRow(ctx, `SELECT `+ruleColumns+` FROM rules WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, r.ID, tenantID))
		if err != nil {
			return change{}, translate(err, "rule")
		}
		if err := checkETag("rule", old.Rule.Name, old.Rule.ETag(), ifMatch); err != nil {
			return change{}, err
		}
		_, err = tx.Exec(ctx, `UPDATE rules SET name = $3, match = $4, key_by = $5, algorithm = $6, lim = $7, window_us = $8,
			burst = $9, warm_up_us = $10, cold_factor = $11, max_delay_us = $12, granularity_us = $13, lease_ttl_us = $14,
			shadow = $15, failure_mode = $16, enabled = $17, sync_us = $18, exact = $19, block = $20, replaces = $21, calendar = $22, time_zone = $23, message = $24, quota = $25, scope = $26, floor = $27, adaptation = $28, partition_by = $29, partitions = $30,
			updated_at = now() WHERE id = $1 AND tenant_id = $2`,
			append([]any{r.ID, tenantID}, args...)...)
		if err != nil {
			return change{}, translate(err, "rule")
		}
		return change{tenantID: tenantID, action: "update", resource: "rule", resourceID: r.ID, old: old.Rule, new: r}, nil
	})
	return version, err
}

// DeleteRule deletes a rule; the tier's later rules move up.
func (s *Store) DeleteRule(ctx context.Context, actor policy.Actor, tenantID, ruleID string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", ruleID, "rule"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		old, err := scanRule(tx.QueryRow(ctx, `DELETE FROM rules WHERE id = $1 AND tenant_id = $2 RETURNING `+ruleColumns, ruleID, tenantID))
		if err != nil {
			return change{}, translate(err, "rule")
		}
		if _, err := tx.Exec(ctx, `UPDATE rules r SET position = o.n - 1 FROM (
			SELECT id, row_number() OVER (ORDER BY position) AS n FROM rules WHERE tier_id = $1) o
			WHERE r.id = o.id AND r.position <> o.n - 1`, old.tierID); err != nil {
			return change{}, translate(err, "rule")
		}
		return change{tenantID: tenantID, action: "delete", resource: "rule", resourceID: ruleID, old: old.Rule}, nil
	})
	return version, err
}

// ReorderRules sets the order of a tier's rules; ids must list each of the
// tier's rules exactly once.
func (s *Store) ReorderRules(ctx context.Context, actor policy.Actor, tenantID, tierID string, ids []string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", tierID, "tier"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		var current []string
		err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(r.id::text ORDER BY r.position), '{}') FROM tiers t
			LEFT JOIN rules r ON r.tier_id = t.id WHERE t.id = $1 AND t.tenant_id = $2 GROUP BY t.id`, tierID, tenantID).Scan(&current)
		if err != nil {
			return change{}, translate(err, "tier")
		}
		if !samePermutation(current, ids) {
			return change{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid order",
				Fields: []policy.FieldError{{Field: "rule_ids", Description: "must list each rule of the tier exactly once"}}}
		}
		// The (tier, position) constraint is deferred: positions may cross.
		if _, err := tx.Exec(ctx, `UPDATE rules r SET position = o.ord - 1 FROM unnest($1::uuid[]) WITH ORDINALITY AS o(id, ord)
			WHERE r.id = o.id AND r.tier_id = $2`, ids, tierID); err != nil {
			return change{}, translate(err, "rule")
		}
		return change{tenantID: tenantID, action: "reorder", resource: "tier", resourceID: tierID, old: current, new: ids}, nil
	})
	return version, err
}

func samePermutation(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
