// Package pgstore is Sluice's PostgreSQL store on a pgx/v5 pool. It
// translates PostgreSQL errors into policy errors at its edge.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/auditdiff"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/policy"
)

// NotifyChannel is the LISTEN/NOTIFY channel of committed config versions;
// the payload is "<tenant id>:<version>". PostgreSQL delivers a
// notification only when its transaction commits.
const NotifyChannel = "sluice_config"

// Store is the control plane's PostgreSQL store. It is safe for concurrent
// use. Every change of a tenant's configuration bumps the tenant's config
// version, records it, writes an audit row and notifies NotifyChannel, all
// in the change's transaction.
type Store struct {
	pool *pgxpool.Pool
	db   db      // the pool, or the transaction of Atomically
	tx   *atomic // non-nil within Atomically
}

// db is what the store's queries need of a pool or a transaction; a
// transaction's Begin starts a savepoint.
type db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// atomic is the state of one Atomically: the config version each tenant
// it changed is at, and whether a change failed.
type atomic struct {
	versions map[string]int64
	failed   bool
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool, db: pool} }

// Atomically runs f with a store whose every change is made in one
// transaction, committed when f returns nil and commit is true, else
// rolled back: with commit false f makes its changes, sees them and
// meets every error they would meet, and none stays (a dry run). The
// changes of a tenant within it are one config version (one version row,
// one notification, an audit row each). A change that fails ends the
// transaction: Atomically then returns an error even when f does not.
func (s *Store) Atomically(ctx context.Context, commit bool, f func(*Store) error) error {
	if s.tx != nil {
		return errors.New("pgstore: Atomically within Atomically")
	}
	errDryRun := errors.New("dry run")
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		in := &Store{pool: s.pool, db: tx, tx: &atomic{versions: map[string]int64{}}}
		err := f(in)
		switch {
		case err != nil:
			return err
		case in.tx.failed:
			return errors.New("pgstore: a change failed within Atomically")
		case !commit:
			return errDryRun
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// LockTenant locks the tenant's row until the end of the transaction of
// Atomically, so that what f reads of the tenant stays current: changes
// of the tenant elsewhere wait for it. Outside Atomically it does nothing.
func (s *Store) LockTenant(ctx context.Context, tenantID string) error {
	if s.tx == nil {
		return nil
	}
	if err := checkID(tenantID, "tenant"); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE`, tenantID)
	return translate(err, "tenant")
}

// Pool returns the store's pool, for readers of the same database (the
// reports on the analytics tables).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// change is one configuration change of a tenant, for the audit log.
type change struct {
	tenantID   string
	action     string // create, update, delete, reorder, revoke
	resource   string // tenant, tier, rule, override, key
	resourceID string
	old, new   any // JSON-encoded into the audit row; nil for none
}

// inTx runs f in a transaction (within Atomically, a savepoint) and
// commits it, or rolls back on error. Errors of the commit itself
// (deferred constraints) are translated too.
func (s *Store) inTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.db, f)
	if err != nil && s.tx != nil {
		s.tx.failed = true
	}
	var pe *policy.Error
	if err == nil || errors.As(err, &pe) {
		return err
	}
	return translate(err, "change")
}

// mutate runs f in a transaction: f makes a change and describes it, and
// mutate records it (see bump) before the commit. It returns the tenant's
// new config version.
//
// An update that changes nothing (no field differs, as the audit log would
// list them) is no change: no version, no audit row, nothing for deciders
// to load; the version returned is the tenant's current one.
func (s *Store) mutate(ctx context.Context, actor policy.Actor, f func(tx pgx.Tx) (change, error)) (int64, error) {
	var version int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := f(tx)
		if err != nil {
			return err
		}
		if c.action == "update" && c.old != nil && c.new != nil {
			if same, err := unchanged(c); err != nil || same {
				if err == nil {
					version, err = s.currentVersion(ctx, tx, c.tenantID)
				}
				return err
			}
		}
		version, err = s.bump(ctx, tx, actor, c)
		return err
	})
	return version, err
}

// unchanged reports whether c's new value has every field of its old one.
func unchanged(c change) (bool, error) {
	oldJSON, err := jsonOrNil(c.old)
	if err != nil {
		return false, err
	}
	newJSON, err := jsonOrNil(c.new)
	if err != nil {
		return false, err
	}
	return len(auditdiff.Changes(oldJSON, newJSON)) == 0, nil
}

// currentVersion is the tenant's config version as tx sees it (within
// Atomically, the one its changes so far took).
func (s *Store) currentVersion(ctx context.Context, tx pgx.Tx, tenantID string) (int64, error) {
	if s.tx != nil && s.tx.versions[tenantID] != 0 {
		return s.tx.versions[tenantID], nil
	}
	var version int64
	err := tx.QueryRow(ctx, `SELECT config_version FROM tenants WHERE id = $1`, tenantID).Scan(&version)
	return version, translate(err, "tenant")
}

// belowLimit refuses, as ResourceExhausted, one more of what count (a
// query of one count, $1 the tenant) counts when the tenant holds max
// already. Concurrent additions may each see room for one: the bound
// holds within the changes in flight at once.
func belowLimit(ctx context.Context, tx pgx.Tx, count, tenantID string, max int, what string) error {
	var n int
	if err := tx.QueryRow(ctx, count, tenantID).Scan(&n); err != nil {
		return translate(err, what)
	}
	if n >= max {
		return policy.Errorf(policy.CodeResourceExhausted, "a tenant holds at most %d %s", max, what)
	}
	return nil
}

// bump records c in tx: the tenant's next config version (the row lock of
// the UPDATE orders concurrent changes of one tenant) with a new random
// stamp, its config_versions row, the audit row and the notification. It
// returns the new version.
// Within Atomically a tenant's second change takes its first's version.
func (s *Store) bump(ctx context.Context, tx pgx.Tx, actor policy.Actor, c change) (int64, error) {
	if s.tx != nil && s.tx.versions[c.tenantID] != 0 {
		v := s.tx.versions[c.tenantID]
		return v, s.record(ctx, tx, actor, c, v)
	}
	var version int64
	err := tx.QueryRow(ctx, `UPDATE tenants SET config_version = config_version + 1, config_stamp = DEFAULT, updated_at = now()
		WHERE id = $1 RETURNING config_version`, c.tenantID).Scan(&version)
	if err != nil {
		return 0, translate(err, "tenant")
	}
	return version, s.record(ctx, tx, actor, c, version)
}

// keptVersions is how many of a tenant's latest config_versions rows are
// kept whatever their age; older rows go once a day old. A watcher further
// behind than both still gets the latest version, which is all a decider
// needs: each version is a whole snapshot.
const keptVersions = 1000

// record writes the version row, the audit row and the notification of c
// at version, and prunes the tenant's old version rows; within Atomically,
// a version already recorded gets only the audit row.
func (s *Store) record(ctx context.Context, tx pgx.Tx, actor policy.Actor, c change, version int64) error {
	oldJSON, err := jsonOrNil(c.old)
	if err != nil {
		return err
	}
	newJSON, err := jsonOrNil(c.new)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	first := s.tx == nil || s.tx.versions[c.tenantID] != version
	if first {
		batch.Queue(`INSERT INTO config_versions (tenant_id, version) VALUES ($1, $2)`, c.tenantID, version)
		batch.Queue(`DELETE FROM config_versions WHERE tenant_id = $1 AND version <= $2
		AND changed_at < now() - interval '1 day'`, c.tenantID, version-keptVersions)
		batch.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, fmt.Sprintf("%s:%d", c.tenantID, version))
	}
	batch.Queue(`INSERT INTO audit_log (tenant_id, actor, action, resource, resource_id, old_value, new_value, version)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, c.tenantID, string(actor), c.action, c.resource, c.resourceID, oldJSON, newJSON, version)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("pgstore: record %s %s: %w", c.action, c.resource, err)
	}
	if s.tx != nil {
		s.tx.versions[c.tenantID] = version
	}
	return nil
}

func jsonOrNil(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("pgstore: audit value: %w", err)
	}
	return b, nil
}

// Unavailable reports whether err, of this store or any query on its
// database, is an outage rather than a fault: the database could not be
// reached or went away (refused, reset or closed connections, a server
// shutting down, starting or out of connection slots). A caller's own
// deadline or cancellation is not one.
func Unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "53300": // admin or crash shutdown, cannot connect now, too many connections
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection exceptions
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || pgconn.SafeToRetry(err)
}

// uniqueFields names the field a unique constraint protects, for the
// field-level detail of a conflict.
var uniqueFields = map[string]string{
	"tenants_slug_key":           "slug",
	"tiers_tenant_id_name_key":   "name",
	"rules_tier_id_name_key":     "name",
	"rules_tier_id_position_key": "rule_ids",
	"overrides_tier_move":        "identifier",
	"overrides_rule_params":      "identifier",
	"overrides_block":            "identifier",
}

// translate turns PostgreSQL errors into policy errors: no rows is
// NotFound; a unique violation is Conflict with the field it protects; a
// foreign key, check or malformed value is Invalid. Anything else is
// wrapped as an internal error.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if Unavailable(err) {
		return policy.ErrDatabaseUnavailable
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return policy.Errorf(policy.CodeNotFound, "%s not found", what)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("pgstore: %s: %w", what, err)
	}
	switch pe.Code {
	case "23505": // unique_violation
		e := policy.Errorf(policy.CodeConflict, "%s already exists", what)
		if f, ok := uniqueFields[pe.ConstraintName]; ok {
			e.Fields = []policy.FieldError{{Field: f, Description: "already used"}}
		}
		return e
	case "23503": // foreign_key_violation
		return policy.Errorf(policy.CodeInvalid, "%s refers to something that does not exist", what)
	case "23514", "23502", "22P02", "22001": // check, not null, invalid text, too long
		return policy.Errorf(policy.CodeInvalid, "invalid %s", what)
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}
