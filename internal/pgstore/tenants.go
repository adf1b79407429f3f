package pgstore

import (
	"context"
	"errors"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// checkID returns a NotFound error for an id that cannot name a row, so a
// malformed id reads like any unknown one.
func checkID(id, what string) error { return checkIDs(id, what) }

// checkIDs is checkID over (id, what) pairs.
func checkIDs(idWhat ...string) error {
	for i := 0; i+1 < len(idWhat); i += 2 {
		if !uuidRE.MatchString(idWhat[i]) {
			return policy.Errorf(policy.CodeNotFound, "%s not found", idWhat[i+1])
		}
	}
	return nil
}

// checkETag refuses a conditioned update (ifMatch not empty) of a row whose
// etag is no longer the one the caller read: another change came first, and
// writing over it would lose it.
func checkETag(what, name, etag, ifMatch string) error {
	if ifMatch == "" || ifMatch == etag {
		return nil
	}
	return policy.Errorf(policy.CodeAborted, "%s %s changed since it was read (etag %s, now %s): read it again and reapply the edit", what, name, ifMatch, etag)
}

// required adds a "required" field error for an empty value to err, the
// result of validating the rest of the input (nil if it was valid).
func required(err error, field, value string) error {
	if value != "" {
		return err
	}
	fe := policy.FieldError{Field: field, Description: "required"}
	var pe *policy.Error
	if errors.As(err, &pe) && pe.Code == policy.CodeInvalid {
		pe.Fields = append([]policy.FieldError{fe}, pe.Fields...)
		return pe
	}
	if err != nil {
		return err
	}
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid request", Fields: []policy.FieldError{fe}}
}

var statusNames = map[policy.TenantStatus]string{policy.TenantActive: "active", policy.TenantSuspended: "suspended"}

func statusOf(s string) policy.TenantStatus {
	if s == "suspended" {
		return policy.TenantSuspended
	}
	return policy.TenantActive
}

const tenantColumns = `id::text, slug, name, status, default_tier, shadow, config_version`

func scanTenant(row pgx.Row) (policy.Tenant, int64, error) {
	var t policy.Tenant
	var status string
	var version int64
	err := row.Scan(&t.ID, &t.Slug, &t.Name, &status, &t.DefaultTier, &t.Shadow, &version)
	t.Status = statusOf(status)
	return t, version, err
}

// CreateTenant stores a new tenant with an empty default tier, at config
// version 1. A DefaultTier of "" means "default".
func (s *Store) CreateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant) (policy.Tenant, error) {
	if t.DefaultTier == "" {
		t.DefaultTier = "default"
	}
	if err := t.Validate(); err != nil {
		return policy.Tenant{}, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		t, _, err = scanTenant(tx.QueryRow(ctx, `INSERT INTO tenants (slug, name, status, default_tier, shadow)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+tenantColumns, t.Slug, t.Name, statusNames[t.Status], t.DefaultTier, t.Shadow))
		if err != nil {
			return translate(err, "tenant")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO tiers (tenant_id, name) VALUES ($1, $2)`, t.ID, t.DefaultTier); err != nil {
			return translate(err, "tier")
		}
		return s.record(ctx, tx, actor, change{tenantID: t.ID, action: "create", resource: "tenant", resourceID: t.ID, new: t}, 1)
	})
	return t, err
}

// GetTenant returns the tenant with id and its config version.
func (s *Store) GetTenant(ctx context.Context, id string) (policy.Tenant, int64, error) {
	if err := checkID(id, "tenant"); err != nil {
		return policy.Tenant{}, 0, err
	}
	t, v, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	return t, v, translate(err, "tenant")
}

// GetTenantBySlug returns the tenant whose slug (Envoy RLS domain) is slug.
func (s *Store) GetTenantBySlug(ctx context.Context, slug string) (policy.Tenant, int64, error) {
	t, v, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE slug = $1`, slug))
	return t, v, translate(err, "tenant")
}

// ListTenants returns every tenant, by slug: PageTenants over every page.
func (s *Store) ListTenants(ctx context.Context) ([]policy.VersionedTenant, error) {
	return allPages(func(after string) ([]policy.VersionedTenant, string, error) {
		return s.PageTenants(ctx, "", after, 1000)
	})
}

// PageTenants returns up to limit (0: 100; more than 1000: 1000) of the
// tenants whose slug starts with prefix, by slug, from just after the slug
// after ("": the first), and the slug to ask the next page after when more
// follow ("" on the last page), each with its config version.
func (s *Store) PageTenants(ctx context.Context, prefix, after string, limit int) ([]policy.VersionedTenant, string, error) {
	limit = pageLimit(limit)
	rows, err := s.db.Query(ctx, `SELECT `+tenantColumns+` FROM tenants
		WHERE slug COLLATE "C" LIKE $1 AND slug COLLATE "C" > $2
		ORDER BY slug COLLATE "C" LIMIT $3`, likePrefix(prefix), after, limit+1)
	if err != nil {
		return nil, "", translate(err, "tenant")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.VersionedTenant, error) {
		t, v, err := scanTenant(r)
		return policy.VersionedTenant{Tenant: t, Version: v}, err
	})
	err = translate(err, "tenant")
	out, more := cutPage(out, limit)
	if err != nil || !more {
		return out, "", err
	}
	return out, out[len(out)-1].Slug, nil
}

// UpdateTenant replaces the tenant's name, status, default tier and shadow (the slug
// is permanent: it keys Envoy domains) and returns the new config version.
func (s *Store) UpdateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant, ifMatch string) (int64, error) {
	if err := checkID(t.ID, "tenant"); err != nil {
		return 0, err
	}
	if err := t.Validate(); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		old, _, err := scanTenant(tx.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1 FOR UPDATE`, t.ID))
		if err != nil {
			return change{}, translate(err, "tenant")
		}
		if err := checkETag("tenant", old.Slug, old.ETag(), ifMatch); err != nil {
			return change{}, err
		}
		if old.Slug != t.Slug {
			return change{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid tenant",
				Fields: []policy.FieldError{{Field: "slug", Description: "cannot change"}}}
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tiers WHERE tenant_id = $1 AND name = $2)`, t.ID, t.DefaultTier).Scan(&exists); err != nil {
			return change{}, translate(err, "tier")
		}
		if !exists {
			return change{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid tenant",
				Fields: []policy.FieldError{{Field: "default_tier", Description: "no tier " + t.DefaultTier + " in this tenant"}}}
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET name = $2, status = $3, default_tier = $4, shadow = $5 WHERE id = $1`,
			t.ID, t.Name, statusNames[t.Status], t.DefaultTier, t.Shadow); err != nil {
			return change{}, translate(err, "tenant")
		}
		return change{tenantID: t.ID, action: "update", resource: "tenant", resourceID: t.ID, old: old, new: t}, nil
	})
	return version, err
}

// DeleteTenant deletes the tenant and everything it owns. The audit log
// keeps the deletion.
func (s *Store) DeleteTenant(ctx context.Context, actor policy.Actor, id string) error {
	if err := checkID(id, "tenant"); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		old, _, err := scanTenant(tx.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return translate(err, "tenant")
		}
		// Record first: the version row goes with the tenant, but the audit
		// row stays and the notification tells deciders to drop it.
		if _, err := s.bump(ctx, tx, actor, change{tenantID: id, action: "delete", resource: "tenant", resourceID: id, old: old}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, id)
		return translate(err, "tenant")
	})
}

// TenantVersions returns every tenant's config version and its stamp
// (policy.Snapshot.Stamp), by tenant id.
func (s *Store) TenantVersions(ctx context.Context) (versions, stamps map[string]int64, err error) {
	rows, err := s.db.Query(ctx, `SELECT id::text, config_version, config_stamp FROM tenants`)
	if err != nil {
		return nil, nil, translate(err, "tenant")
	}
	versions, stamps = map[string]int64{}, map[string]int64{}
	var id string
	var v, stamp int64
	_, err = pgx.ForEachRow(rows, []any{&id, &v, &stamp}, func() error {
		versions[id], stamps[id] = v, stamp
		return nil
	})
	return versions, stamps, translate(err, "tenant")
}

// RaiseVersions raises the config version of each tenant of held (its id →
// the version a decider says it enforces) that is below it, to one past
// it, and returns the tenants' new versions. A decider can hold a later
// version than the database only when the database went back to an
// earlier state: restored from a backup, or failed over to a replica the
// last changes had not reached. Its deciders would then ignore the
// database's configuration (an earlier version than theirs) until the
// tenant's changes outgrew the lost ones; raised, the configuration the
// database holds is the latest again, and goes to every decider. Each
// raise is a change of the tenant (version row, audit row "resync",
// notification), made only while the version is still below. Unknown
// tenants are skipped.
func (s *Store) RaiseVersions(ctx context.Context, actor policy.Actor, held map[string]int64) (map[string]int64, error) {
	out := map[string]int64{}
	for id, have := range held {
		var from int64
		v, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
			err := tx.QueryRow(ctx, `SELECT config_version FROM tenants WHERE id::text = $1 FOR UPDATE`, id).Scan(&from)
			if errors.Is(err, pgx.ErrNoRows) {
				return change{}, errNotBehind
			}
			if err != nil {
				return change{}, translate(err, "tenant")
			}
			if from >= have {
				return change{}, errNotBehind
			}
			if _, err := tx.Exec(ctx, `UPDATE tenants SET config_version = $2 WHERE id::text = $1`, id, have); err != nil {
				return change{}, translate(err, "tenant")
			}
			return change{tenantID: id, action: "resync", resource: "tenant", resourceID: id,
				old: map[string]int64{"config_version": from}, new: map[string]int64{"config_version": have + 1}}, nil
		})
		if errors.Is(err, errNotBehind) {
			continue
		}
		if err != nil {
			return out, err
		}
		out[id] = v
	}
	return out, nil
}

// errNotBehind ends RaiseVersions' transaction of a tenant that needs no
// raise: gone, or caught up meanwhile.
var errNotBehind = &policy.Error{Code: policy.CodeFailedPrecondition, Message: "pgstore: not behind"}
