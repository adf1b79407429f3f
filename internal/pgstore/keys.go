package pgstore

import (
	"context"
	"errors"
	"fmt"
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
}

func paramsToJSON(p *policy.Params) *paramsJSON {
	if p == nil {
		return nil
	}
	return &paramsJSON{Algorithm: p.Algorithm.String(), Limit: p.Limit, WindowUS: p.Window.Microseconds(), Burst: p.Burst,
		WarmUpUS: p.WarmUp.Microseconds(), ColdFactor: p.ColdFactor, MaxDelayUS: p.MaxDelay.Microseconds(),
		GranularUS: p.Granularity.Microseconds(), LeaseTTLUS: p.LeaseTTL.Microseconds(), Calendar: p.Calendar.String(),
		TimeZone: p.TimeZone}
}

func (j *paramsJSON) params() *policy.Params {
	if j == nil {
		return nil
	}
	alg, _ := policy.ParseAlgorithm(j.Algorithm)
	cal, _ := policy.ParseCalendar(j.Calendar) // written by paramsToJSON: a known name
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return &policy.Params{Algorithm: alg, Limit: j.Limit, Window: us(j.WindowUS), Burst: j.Burst, WarmUp: us(j.WarmUpUS),
		ColdFactor: j.ColdFactor, MaxDelay: us(j.MaxDelayUS), Granularity: us(j.GranularUS), LeaseTTL: us(j.LeaseTTLUS), Calendar: cal,
		TimeZone: j.TimeZone}
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

var kindNames = map[policy.KeyKind]string{policy.KeyAdmin: "admin", policy.KeyCheck: "check", policy.KeyViewer: "viewer"}

const keyColumns = `id::text, tenant_id::text, kind, name, prefix, hash, created_at, last_used_at, revoked_at, expires_at`

func scanKey(row pgx.Row) (policy.APIKey, error) {
	var k policy.APIKey
	var kind string
	var used, revoked, expires *time.Time
	err := row.Scan(&k.ID, &k.TenantID, &kind, &k.Name, &k.Prefix, &k.Hash, &k.CreatedAt, &used, &revoked, &expires)
	for kk, name := range kindNames {
		if name == kind {
			k.Kind = kk
		}
	}
	if used != nil {
		k.LastUsedAt = *used
	}
	if revoked != nil {
		k.RevokedAt = *revoked
	}
	if expires != nil {
		k.ExpiresAt = *expires
	}
	return k, err
}

// CreateKey makes a new key of kind for the tenant and returns its secret,
// which is not stored and cannot be shown again, with the key's record.
// Check keys change what deciders accept, so they bump the config version.
func (s *Store) CreateKey(ctx context.Context, actor policy.Actor, tenantID string, kind policy.KeyKind, name string) (string, policy.APIKey, error) {
	return s.CreateExpiringKey(ctx, actor, tenantID, kind, name, time.Time{})
}

// CreateExpiringKey is CreateKey for a key that stops working at expires
// (which must be ahead; zero: never).
func (s *Store) CreateExpiringKey(ctx context.Context, actor policy.Actor, tenantID string, kind policy.KeyKind, name string, expires time.Time) (string, policy.APIKey, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return "", policy.APIKey{}, err
	}
	var expiresAt *time.Time
	if !expires.IsZero() {
		if !time.Now().Before(expires) {
			return "", policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid key",
				Fields: []policy.FieldError{{Field: "expires_at", Description: "must be in the future"}}}
		}
		expiresAt = &expires
	}
	if _, ok := kindNames[kind]; !ok || len(name) > policy.MaxNameLen {
		return "", policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid key",
			Fields: []policy.FieldError{{Field: "kind", Description: "must be admin, viewer or check, with a name of at most 100 bytes"}}}
	}
	var secret string
	var k policy.APIKey
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if secret, k, err = insertKey(ctx, tx, tenantID, kind, name, expiresAt); err != nil {
			return err
		}
		_, err = s.bump(ctx, tx, actor, change{tenantID: tenantID, action: "create", resource: "key", resourceID: k.ID,
			new: map[string]any{"kind": kindNames[kind], "name": name, "prefix": k.Prefix, "expires_at": expiresAt}})
		return err
	})
	if err != nil {
		return "", policy.APIKey{}, err
	}
	return secret, k, nil
}

// insertKey makes a new key of kind in tx, below the tenant's bound on
// live keys, and returns its secret and its record.
func insertKey(ctx context.Context, tx pgx.Tx, tenantID string, kind policy.KeyKind, name string, expiresAt *time.Time) (string, policy.APIKey, error) {
	err := belowLimit(ctx, tx, `SELECT count(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL
		AND (expires_at IS NULL OR expires_at > now())`, tenantID, policy.MaxLiveKeys, "live keys")
	if err != nil {
		return "", policy.APIKey{}, err
	}
	secret, prefix := policy.NewKeySecret(kind)
	hash := policy.HashKey(secret)
	k, err := scanKey(tx.QueryRow(ctx, `INSERT INTO api_keys (tenant_id, kind, name, prefix, hash, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING `+keyColumns, tenantID, kindNames[kind], name, prefix, hash[:], expiresAt))
	if err != nil {
		return "", policy.APIKey{}, translate(err, "key")
	}
	return secret, k, nil
}

// MaxKeyGrace bounds how long a rotated key keeps working (RotateKey).
const MaxKeyGrace = 30 * 24 * time.Hour

// RotateKey replaces the live key keyID with a new one of its kind, name
// and expiry, and returns the new one's secret and record, and the old
// one's record: the old key keeps working for grace (0: revoked at once;
// never past its own expiry), so that its users can move to the new
// secret without a refused call. One transaction, one audit entry and,
// as with every key, one config version. A revoked or expired key is not
// rotated (FailedPrecondition): create a new one.
func (s *Store) RotateKey(ctx context.Context, actor policy.Actor, tenantID, keyID string, grace time.Duration) (string, policy.APIKey, policy.APIKey, error) {
	if err := checkIDs(tenantID, "tenant", keyID, "key"); err != nil {
		return "", policy.APIKey{}, policy.APIKey{}, err
	}
	if grace < 0 || grace > MaxKeyGrace {
		return "", policy.APIKey{}, policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid rotation",
			Fields: []policy.FieldError{{Field: "grace", Description: fmt.Sprintf("must be between 0 (revoke at once) and %v", MaxKeyGrace)}}}
	}
	var secret string
	var old, k policy.APIKey
	_, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		var err error
		old, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, keyID, tenantID))
		if err != nil {
			return change{}, translate(err, "key")
		}
		if !old.RevokedAt.IsZero() || !old.ExpiresAt.IsZero() && !old.ExpiresAt.After(time.Now()) {
			return change{}, policy.Errorf(policy.CodeFailedPrecondition, "key %s is revoked or expired: create a new one", old.Prefix)
		}
		var expiresAt *time.Time
		if !old.ExpiresAt.IsZero() {
			expiresAt = &old.ExpiresAt
		}
		if secret, k, err = insertKey(ctx, tx, tenantID, old.Kind, old.Name, expiresAt); err != nil {
			return change{}, err
		}
		if grace == 0 {
			old, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1 RETURNING `+keyColumns, keyID))
		} else {
			old, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 microsecond')
				WHERE id = $1 RETURNING `+keyColumns, keyID, grace.Microseconds()))
		}
		if err != nil {
			return change{}, translate(err, "key")
		}
		return change{tenantID: tenantID, action: "rotate", resource: "key", resourceID: keyID,
			new: map[string]any{"replaced_by": k.ID, "prefix": k.Prefix, "grace": grace.String()}}, nil
	})
	if err != nil {
		return "", policy.APIKey{}, policy.APIKey{}, err
	}
	return secret, k, old, nil
}

// ListKeys returns all the tenant's keys (never their secrets), revoked
// ones too, oldest first: PageKeys over every page.
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]policy.APIKey, error) {
	return allPages(func(after *policy.KeyCursor) ([]policy.APIKey, *policy.KeyCursor, error) {
		return s.PageKeys(ctx, tenantID, true, after, 1000)
	})
}

// PageKeys returns up to limit (0: 100; more than 1000: 1000) of the
// tenant's keys (never their secrets), oldest first, revoked ones only
// with revoked, from just after the cursor (nil: the first), and the
// cursor of the page's end when more follow (nil on the last page).
func (s *Store) PageKeys(ctx context.Context, tenantID string, revoked bool, after *policy.KeyCursor, limit int) ([]policy.APIKey, *policy.KeyCursor, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, nil, err
	}
	limit = pageLimit(limit)
	var afterAt *time.Time
	var afterID *string
	if after != nil {
		if !uuidRE.MatchString(after.ID) {
			return nil, nil, policy.ErrPageToken
		}
		afterAt, afterID = &after.CreatedAt, &after.ID
	}
	rows, err := s.db.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE tenant_id = $1 AND ($2 OR revoked_at IS NULL)
		AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
		ORDER BY created_at, id LIMIT $5`, tenantID, revoked, afterAt, afterID, limit+1)
	if err != nil {
		return nil, nil, translate(err, "key")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.APIKey, error) { return scanKey(r) })
	out, more := cutPage(out, limit)
	if err != nil || !more {
		return out, nil, translate(err, "key")
	}
	last := out[len(out)-1]
	return out, &policy.KeyCursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// RevokeKey revokes a key at once. Revoking it again keeps the first
// revocation time.
func (s *Store) RevokeKey(ctx context.Context, actor policy.Actor, tenantID, keyID string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", keyID, "key"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		k, err := scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
			WHERE id = $1 AND tenant_id = $2 RETURNING `+keyColumns, keyID, tenantID))
		if err != nil {
			return change{}, translate(err, "key")
		}
		return change{tenantID: tenantID, action: "revoke", resource: "key", resourceID: keyID,
			new: map[string]string{"prefix": k.Prefix}}, nil
	})
	return version, err
}

// KeyByHash returns the unrevoked key whose secret hashes to hash, and
// records the use of an admin or viewer key, unless recorded in the last 10
// seconds: a console makes several calls a refresh, and a row version each
// would only bloat the table. (A check key is used where a decider
// accepts it: TouchCheckKeys.) An unknown or revoked key is
// Unauthenticated.
func (s *Store) KeyByHash(ctx context.Context, hash [32]byte) (policy.APIKey, error) {
	// The statement's snapshot cannot see its own update: the last use
	// returned is now() when it touched the row.
	k, err := scanKey(s.db.QueryRow(ctx, `WITH k AS (
			SELECT id FROM api_keys WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		), touched AS (
			UPDATE api_keys a SET last_used_at = now() FROM k WHERE a.id = k.id AND a.kind IN ('admin', 'viewer')
				AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '10 seconds')
			RETURNING a.id
		)
		SELECT id::text, tenant_id::text, kind, name, prefix, hash, created_at,
			CASE WHEN EXISTS (SELECT FROM touched) THEN now() ELSE last_used_at END, revoked_at, expires_at
		FROM api_keys WHERE id = (SELECT id FROM k)`, hash[:]))
	if err != nil {
		if policy.ErrorCode(translate(err, "key")) == policy.CodeNotFound {
			return k, policy.Errorf(policy.CodeUnauthenticated, "invalid, revoked or expired key")
		}
		return k, translate(err, "key")
	}
	return k, nil
}

// MaxTouchedKeys bounds the hashes of one TouchCheckKeys call.
const MaxTouchedKeys = 10_000

// TouchCheckKeys records the use now of the live check keys whose secrets
// hash to hashes (what deciders accepted since they last reported);
// unknown, revoked and admin keys are left alone, and so are keys recorded
// in the last 10 seconds: every decider reports a busy key each pull, and
// one row update for all of them spares the table. Hashes past
// MaxTouchedKeys, and any not 32 bytes long, are ignored.
func (s *Store) TouchCheckKeys(ctx context.Context, hashes [][]byte) error {
	valid := make([][]byte, 0, min(len(hashes), MaxTouchedKeys))
	for _, h := range hashes[:min(len(hashes), MaxTouchedKeys)] {
		if len(h) == 32 {
			valid = append(valid, h)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	_, err := s.db.Exec(ctx, `UPDATE api_keys SET last_used_at = now()
		WHERE hash = ANY($1) AND kind = 'check' AND revoked_at IS NULL
			AND (last_used_at IS NULL OR last_used_at < now() - interval '10 seconds')`, valid)
	if err != nil {
		return fmt.Errorf("pgstore: touch check keys: %w", err)
	}
	return nil
}

// ListAudit returns the tenant's audit log, newest first, at most limit
// entries with ids below before (0: from the newest), only those of the
// resource resourceID unless it is "".
func (s *Store) ListAudit(ctx context.Context, tenantID string, before int64, limit int, resourceID string) ([]policy.AuditEntry, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	// Actors that are keys ("key:<id>") are named by the key's name and
	// prefix, revoked or not.
	rows, err := s.db.Query(ctx, `SELECT a.id, a.actor, coalesce(nullif(k.name, '') || ' (' || k.prefix || '…)', k.prefix || '…', ''),
		a.action, a.resource, a.resource_id, a.old_value, a.new_value, coalesce(a.version, 0), a.at
		FROM audit_log a LEFT JOIN api_keys k ON k.id = CASE WHEN a.actor LIKE 'key:%' THEN substr(a.actor, 5)::uuid END
		WHERE a.tenant_id = $1 AND ($2 = 0 OR a.id < $2) AND ($4 = '' OR a.resource_id = $4)
		ORDER BY a.id DESC LIMIT $3`, tenantID, before, limit, resourceID)
	if err != nil {
		return nil, translate(err, "audit")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.AuditEntry, error) {
		var a policy.AuditEntry
		return a, r.Scan(&a.ID, &a.Actor, &a.ActorName, &a.Action, &a.Resource, &a.ResourceID, &a.Old, &a.New, &a.Version, &a.At)
	})
	return out, translate(err, "audit")
}

// Snapshot returns the tenant's whole configuration at one version, read in
// one repeatable-read transaction, with its live check keys and overrides
// (those expired already left out: they apply to nothing, and a tenant's
// expired overrides are not bounded as its live ones are).
func (s *Store) Snapshot(ctx context.Context, tenantID string) (*policy.Snapshot, []policy.CheckKey, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, nil, err
	}
	var snap policy.Snapshot
	var keys []policy.CheckKey
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		row := tx.QueryRow(ctx, `SELECT `+tenantColumns+`, config_stamp FROM tenants WHERE id = $1`, tenantID)
		snap.Tenant, snap.Version, err = scanTenant(withStamp{row, &snap.Stamp})
		if err != nil {
			return translate(err, "tenant")
		}
		if snap.Tiers, err = listTiers(ctx, tx, tenantID); err != nil {
			return err
		}
		if snap.Overrides, err = listOverrides(ctx, tx, tenantID, true); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT hash, expires_at FROM api_keys WHERE tenant_id = $1 AND kind = 'check'
			AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, tenantID)
		if err != nil {
			return translate(err, "key")
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.CheckKey, error) {
			var h []byte
			var expires *time.Time
			var out policy.CheckKey
			if err := r.Scan(&h, &expires); err != nil {
				return out, err
			}
			if len(h) != len(out.Hash) {
				return out, fmt.Errorf("key hash of %d bytes", len(h))
			}
			copy(out.Hash[:], h)
			if expires != nil {
				out.ExpiresAt = *expires
			}
			return out, nil
		})
		return translate(err, "key")
	})
	if err != nil {
		return nil, nil, err
	}
	return &snap, keys, nil
}

// withStamp is a row of tenantColumns and then config_stamp, which it
// scans into stamp.
type withStamp struct {
	pgx.Row
	stamp *int64
}

func (r withStamp) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.stamp)...) }

// pruneBatch is how many rows one statement of PruneAudit or
// PruneOverrides deletes, so that pruning a long backlog never holds one
// long transaction.
const pruneBatch = 5000

// PruneAudit deletes the audit rows of every tenant written before before,
// oldest first, and returns how many went.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, `DELETE FROM audit_log WHERE id IN
			(SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)`, before, pruneBatch)
		if err != nil {
			return total, fmt.Errorf("pgstore: prune audit: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// DefaultOverrideRetention is how long an override is kept once it has
// expired, unless the control plane is told otherwise: long enough to be
// seen as expired in the console, short enough that a tenant's temporary
// blocks do not pile up.
const DefaultOverrideRetention = 7 * 24 * time.Hour

// PruneOverrides deletes the overrides of every tenant that expired before
// before, and returns how many went. Each tenant's go in one config
// version, at most pruneBatch a transaction, with an audit row each whose
// actor is policy.ActorRetention.
func (s *Store) PruneOverrides(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		var tenantID string
		err := s.db.QueryRow(ctx, `SELECT tenant_id::text FROM overrides WHERE expires_at < $1 LIMIT 1`, before).Scan(&tenantID)
		if errors.Is(err, pgx.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("pgstore: prune overrides: %w", err)
		}
		var n int
		err = s.Atomically(ctx, true, func(in *Store) error {
			return in.inTx(ctx, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `DELETE FROM overrides WHERE id IN (SELECT id FROM overrides
					WHERE tenant_id = $1 AND expires_at < $2 LIMIT $3) RETURNING `+overrideColumns, tenantID, before, pruneBatch)
				if err != nil {
					return err
				}
				gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Override, error) { return scanOverride(r) })
				if err != nil {
					return err
				}
				for _, o := range gone {
					if _, err := in.bump(ctx, tx, policy.ActorRetention, change{tenantID: tenantID, action: "delete", resource: "override", resourceID: o.ID, old: o}); err != nil {
						return err
					}
				}
				n = len(gone)
				return nil
			})
		})
		total += int64(n)
		if err != nil {
			return total, fmt.Errorf("pgstore: prune overrides: %w", err)
		}
	}
}
