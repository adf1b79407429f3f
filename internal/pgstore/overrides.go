package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

const overrideColumns = `id::text, descriptor_key, identifier, coalesce(tier_name, ''), coalesce(rule_id::text, ''), params, expires_at, block`

// paramsJSON is the stored form of an override's replacement parameters.
type paramsJSON struct {
	Algorithm  string  `json:"algorithm"`
	Limit      int64   `json:"limit"`
	WindowUS   int64   `json:"window_us,omitempty"`
	Burst      int64   `json:"burst,omitempty"`
	WarmUpUS   int64   `json:"warm_up_us,omitempty"`
	ColdFactor float64 `json:"cold_factor,omitempty"`
	MaxDelayUS int64   `json:"max_delay_us,omitempty"`
	GranularUS int64   `json:"granularity_us,omitempty"`
	LeaseTTLUS int64   `json:"lease_ttl_us,omitempty"`
	Calendar   string  `json:"calendar,omitempty"`
	TimeZone   string  `json:"time_zone,omitempty"`
	Floor      int64   `json:"floor,omitempty"`
	Adaptation string  `json:"adaptation,omitempty"`
}

func paramsToJSON(p *policy.Params) *paramsJSON {
	if p == nil {
		return nil
	}
	return &paramsJSON{Algorithm: p.Algorithm.String(), Limit: p.Limit, WindowUS: p.Window.Microseconds(), Burst: p.Burst,
		WarmUpUS: p.WarmUp.Microseconds(), ColdFactor: p.ColdFactor, MaxDelayUS: p.MaxDelay.Microseconds(),
		GranularUS: p.Granularity.Microseconds(), LeaseTTLUS: p.LeaseTTL.Microseconds(), Calendar: p.Calendar.String(),
		TimeZone: p.TimeZone, Floor: p.Floor, Adaptation: p.Adaptation.String()}
}

func (j *paramsJSON) params() *policy.Params {
	if j == nil {
		return nil
	}
	alg, _ := policy.ParseAlgorithm(j.Algorithm)
	cal, _ := policy.ParseCalendar(j.Calendar) // written by paramsToJSON: a known name
	adapt, _ := policy.ParseAdaptation(j.Adaptation)
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return &policy.Params{Algorithm: alg, Limit: j.Limit, Window: us(j.WindowUS), Burst: j.Burst, WarmUp: us(j.WarmUpUS),
		ColdFactor: j.ColdFactor, MaxDelay: us(j.MaxDelayUS), Granularity: us(j.GranularUS), LeaseTTL: us(j.LeaseTTLUS), Calendar: cal,
		TimeZone: j.TimeZone, Floor: j.Floor, Adaptation: adapt}
}

func scanOverride(row pgx.Row) (policy.Override, error) {
	var o policy.Override
	var pj *paramsJSON
	var expires *time.Time
	err := row.Scan(&o.ID, &o.Key, &o.Identifier, &o.Tier, &o.RuleID, &pj, &expires, &o.Block)
	o.Params = pj.params()
	if expires != nil {
		o.ExpiresAt = *expires
	}
	return o, err
}

// CreateOverride adds a per-client exception, which must not have expired
// already; a tenant holds at most policy.MaxOverrides that have not
// expired (PruneOverrides deletes the others in time).
func (s *Store) CreateOverride(ctx context.Context, actor policy.Actor, tenantID string, o policy.Override) (policy.Override, int64, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return o, 0, err
	}
	o.ID = ""
	if err := validOverride(o); err != nil {
		return o, 0, err
	}
	if !o.ExpiresAt.IsZero() && !time.Now().Before(o.ExpiresAt) {
		return o, 0, &policy.Error{Code: policy.CodeInvalid, Message: "invalid override",
			Fields: []policy.FieldError{{Field: "expires_at", Description: "must be in the future"}}}
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		if err := belowLimit(ctx, tx, `SELECT count(*) FROM overrides WHERE tenant_id = $1
			AND (expires_at IS NULL OR expires_at > now())`, tenantID, policy.MaxOverrides, "live overrides"); err != nil {
			return change{}, err
		}
		if err := overrideTarget(ctx, tx, tenantID, &o, nil); err != nil {
			return change{}, err
		}
		// The override as stored (its expiry to the microsecond), as reads
		// will return it and its etag.
		stored, err := scanOverride(tx.QueryRow(ctx, `INSERT INTO overrides (tenant_id, descriptor_key, identifier, tier_name, rule_id, params, expires_at, block)
			VALUES ($1, $2, $3, nullif($4, ''), nullif($5, '')::uuid, $6, $7, $8) RETURNING `+overrideColumns,
			tenantID, o.IdentifierKey(), o.Identifier, o.Tier, o.RuleID, paramsToJSON(o.Params), expiresAt(o), o.Block))
		if err != nil {
			return change{}, translate(err, "override")
		}
		o = stored
		return change{tenantID: tenantID, action: "create", resource: "override", resourceID: o.ID, new: o}, nil
	})
	return o, version, err
}

// expiresAt is o's expiry as stored: NULL for never.
func expiresAt(o policy.Override) *time.Time {
	if o.ExpiresAt.IsZero() {
		return nil
	}
	return &o.ExpiresAt
}

// validOverride validates o, its rule id included, as far as it can
// without the database: partial parameters (inherited, see
// overrideTarget) as they will be once complete, their algorithm aside.
func validOverride(o policy.Override) error {
	if o.RuleID != "" && checkID(o.RuleID, "rule") != nil {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid override",
			Fields: []policy.FieldError{{Field: "rule_id", Description: "no such rule"}}}
	}
	if inherits(o) {
		return nil // validated once complete
	}
	return o.Validate()
}

// inherits reports whether o changes its rule's parameters without naming
// an algorithm, to be completed from the rule's (or its own) parameters.
func inherits(o policy.Override) bool {
	return o.Params != nil && o.Params.Partial() && o.RuleID != "" && !o.Block
}

// UpdateOverride replaces the override o.ID, in one config version. When
// ifMatch is not empty, the update is refused with policy.CodeAborted unless
// the override's etag (policy.Override.ETag) is still ifMatch.
func (s *Store) UpdateOverride(ctx context.Context, actor policy.Actor, tenantID string, o policy.Override, ifMatch string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", o.ID, "override"); err != nil {
		return 0, err
	}
	if err := validOverride(o); err != nil {
		return 0, err
	}
	return s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		old, err := scanOverride(tx.QueryRow(ctx, `SELECT `+overrideColumns+` FROM overrides WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, o.ID, tenantID))
		if err != nil {
			return change{}, translate(err, "override")
		}
		if err := checkETag("override", old.Identifier, old.ETag(), ifMatch); err != nil {
			return change{}, err
		}
		var own *policy.Params
		if old.RuleID == o.RuleID {
			own = old.Params
		}
		if err := overrideTarget(ctx, tx, tenantID, &o, own); err != nil {
			return change{}, err
		}
		_, err = tx.Exec(ctx, `UPDATE overrides SET descriptor_key = $3, identifier = $4, tier_name = nullif($5, ''), rule_id = nullif($6, '')::uuid,
			params = $7, expires_at = $8, block = $9 WHERE id = $1 AND tenant_id = $2`,
			o.ID, tenantID, o.IdentifierKey(), o.Identifier, o.Tier, o.RuleID, paramsToJSON(o.Params), expiresAt(o), o.Block)
		if err != nil {
			return change{}, translate(err, "override")
		}
		o.Key = o.IdentifierKey()
		return change{tenantID: tenantID, action: "update", resource: "override", resourceID: o.ID, old: old, new: o}, nil
	})
}

// overrideTarget checks that the override's tier or rule belongs to the
// tenant, with a field error otherwise, and completes partial parameters
// (policy.Params.Inherit) from own, the override's parameters for the
// same rule before an update, else from the rule's, then validates them.
func overrideTarget(ctx context.Context, tx pgx.Tx, tenantID string, o *policy.Override, own *policy.Params) error {
	if o.Tier == "" && o.RuleID == "" { // a block of every request
		return nil
	}
	missing := func(field string) error {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid override",
			Fields: []policy.FieldError{{Field: field, Description: "does not exist in this tenant"}}}
	}
	if o.RuleID == "" {
		var ok bool
		// A share lock: DeleteTier, which locks the tier to update it,
		// waits for this override and then sees it (or this waits for the
		// delete and finds no tier).
		err := tx.QueryRow(ctx, `SELECT true FROM tiers WHERE tenant_id = $1 AND name = $2 FOR SHARE`, tenantID, o.Tier).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return missing("tier")
		}
		return translate(err, "override")
	}
	r, err := scanRule(tx.QueryRow(ctx, `SELECT `+ruleColumns+` FROM rules WHERE tenant_id = $1 AND id = $2::uuid`, tenantID, o.RuleID))
	if errors.Is(err, pgx.ErrNoRows) {
		return missing("rule_id")
	}
	if err != nil {
		return translate(err, "override")
	}
	if !inherits(*o) {
		return nil
	}
	base := r.Params
	if own != nil {
		base = *own
	}
	p := o.Params.Inherit(base)
	o.Params = &p
	return o.Validate()
}

// ListOverrides returns the tenant's overrides.
func (s *Store) ListOverrides(ctx context.Context, tenantID string) ([]policy.Override, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, err
	}
	return listOverrides(ctx, s.db, tenantID, false)
}

// listOverrides returns the tenant's overrides, or with live only those
// that have not expired.
func listOverrides(ctx context.Context, q querier, tenantID string, live bool) ([]policy.Override, error) {
	rows, err := q.Query(ctx, `SELECT `+overrideColumns+` FROM overrides WHERE tenant_id = $1
		AND (NOT $2 OR expires_at IS NULL OR expires_at > now())
		ORDER BY identifier, descriptor_key, block, created_at, id`, tenantID, live)
	if err != nil {
		return nil, translate(err, "override")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Override, error) { return scanOverride(r) })
	return out, translate(err, "override")
}

// PageOverrides returns up to limit (0: 100; more than 1000: 1000) of the tenant's
// overrides whose identifier starts with prefix, in the byte order of the
// identifiers (then ids), from just after the cursor (nil: the first), and
// the cursor of the page's end when more follow (nil on the last page).
// Overrides created or deleted between pages are seen or not by later
// pages as their place falls; none is seen twice.
func (s *Store) PageOverrides(ctx context.Context, tenantID, prefix string, after *policy.OverrideCursor, limit int) ([]policy.Override, *policy.OverrideCursor, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, nil, err
	}
	limit = pageLimit(limit)
	var afterIdent, afterID *string
	if after != nil {
		if !uuidRE.MatchString(after.ID) {
			return nil, nil, policy.ErrPageToken
		}
		afterIdent, afterID = &after.Identifier, &after.ID
	}
	rows, err := s.db.Query(ctx, `SELECT `+overrideColumns+` FROM overrides
		WHERE tenant_id = $1 AND identifier COLLATE "C" LIKE $2
		AND ($3::text IS NULL OR (identifier COLLATE "C", id) > ($3::text COLLATE "C", $4::uuid))
		ORDER BY identifier COLLATE "C", id LIMIT $5`, tenantID, likePrefix(prefix), afterIdent, afterID, limit+1)
	if err != nil {
		return nil, nil, translate(err, "override")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Override, error) { return scanOverride(r) })
	out, more := cutPage(out, limit)
	if err != nil || !more {
		return out, nil, translate(err, "override")
	}
	last := out[len(out)-1]
	return out, &policy.OverrideCursor{Identifier: last.Identifier, ID: last.ID}, nil
}

// DeleteOverride removes an override.
func (s *Store) DeleteOverride(ctx context.Context, actor policy.Actor, tenantID, id string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", id, "override"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		old, err := scanOverride(tx.QueryRow(ctx, `DELETE FROM overrides WHERE id = $1 AND tenant_id = $2 RETURNING `+overrideColumns, id, tenantID))
		if err != nil {
			return change{}, translate(err, "override")
		}
		return change{tenantID: tenantID, action: "delete", resource: "override", resourceID: id, old: old}, nil
	})
	return version, err
}
