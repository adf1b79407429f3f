package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

// WatchConfig configures Watch.
type WatchConfig struct {
	// Since holds the last version the caller has of each tenant; versions
	// after them are delivered (all versions of tenants not in it).
	Since map[string]int64
	// Recheck is how often every tenant is re-read even without a
	// notification, so that a lost one delays a change but never loses it.
	// 0 means 5s.
	Recheck time.Duration
	// Channel is the LISTEN channel; "" means NotifyChannel.
	Channel string
	Logger  *slog.Logger
	// Listening, if set, is called each time the watch listens and has
	// caught up: every change committed after it is then delivered.
	Listening func()
}

// Watch calls emit with every config version committed after cfg.Since, in
// version order per tenant, until ctx ends or emit fails; a tenant found
// behind what was delivered of it is emitted at its version now, Back. It listens for
// notifications on a connection of its own and re-reads config_versions on
// each, and every Recheck; a dropped connection is reopened. Rolled-back
// changes are never delivered: they are neither in the table nor notified.
func (s *Store) Watch(ctx context.Context, cfg WatchConfig, emit func(policy.Version) error) error {
	if cfg.Recheck <= 0 {
		cfg.Recheck = 5 * time.Second
	}
	if cfg.Channel == "" {
		cfg.Channel = NotifyChannel
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	known := make(map[string]int64, len(cfg.Since))
	for k, v := range cfg.Since {
		known[k] = v
	}
	for {
		err := s.watchConn(ctx, cfg, known, emit)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var emitErr emitError
		if errors.As(err, &emitErr) {
			return emitErr.err
		}
		cfg.Logger.WarnContext(ctx, "config watch: reconnecting", "err", err)
		select { // a short pause, so a database that is down is not hammered
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(cfg.Recheck, time.Second)):
		}
	}
}

// emitError marks an error of the caller's emit: Watch returns it.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }

// watchConn watches on one connection until it fails.
func (s *Store) watchConn(ctx context.Context, cfg WatchConfig, known map[string]int64, emit func(policy.Version) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// LISTEN state belongs to the session: take the connection out of the
	// pool so that nobody else gets it, and close it when done.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	// Catch up after (re)connecting: anything committed meanwhile.
	if err := s.catchUp(ctx, "", known, emit); err != nil {
		return err
	}
	if cfg.Listening != nil {
		cfg.Listening()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, cfg.Recheck)
		n, err := pc.WaitForNotification(wctx)
		cancel()
		tenant := ""
		switch {
		case err == nil:
			tenant, _, _ = strings.Cut(n.Payload, ":")
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded): // the periodic re-check of every tenant
		default:
			return err
		}
		if err := s.catchUp(ctx, tenant, known, emit); err != nil {
			return err
		}
	}
}

// catchUp emits the versions of tenant (every tenant when "") committed
// after known, the deletion of known tenants that are gone, and first of
// all the known tenants found at an earlier version than known (Back).
func (s *Store) catchUp(ctx context.Context, tenant string, known map[string]int64, emit func(policy.Version) error) error {
	ids := make([]string, 0, len(known))
	vers := make([]int64, 0, len(known))
	for id, v := range known {
		ids, vers = append(ids, id), append(vers, v)
	}
	// Known tenants gone (no version) or behind what was delivered. A
	// tenant's version only grows in one database: what was delivered was
	// committed, with the tenant's row at it or later.
	rows, err := s.db.Query(ctx, `SELECT k.id::text, t.config_version FROM unnest($1::uuid[], $2::bigint[]) AS k(id, ver)
		LEFT JOIN tenants t ON t.id = k.id
		WHERE ($3 = '' OR k.id::text = $3) AND (t.id IS NULL OR t.config_version < k.ver)`, ids, vers, tenant)
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	var gone, back []policy.Version
	var id string
	var now *int64
	_, err = pgx.ForEachRow(rows, []any{&id, &now}, func() error {
		if now == nil {
			gone = append(gone, policy.Version{TenantID: id, Version: known[id] + 1, Deleted: true})
		} else {
			back = append(back, policy.Version{TenantID: id, Version: *now, Back: true})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	if err := deliver(back, known, emit); err != nil {
		return err
	}
	rows, err = s.db.Query(ctx, `SELECT v.tenant_id::text, v.version FROM config_versions v
		LEFT JOIN unnest($1::uuid[], $2::bigint[]) AS k(id, ver) ON k.id = v.tenant_id
		WHERE ($3 = '' OR v.tenant_id::text = $3) AND v.version > coalesce(k.ver, 0)
		ORDER BY v.tenant_id, v.version`, ids, vers, tenant)
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Version, error) {
		var v policy.Version
		return v, r.Scan(&v.TenantID, &v.Version)
	})
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	if err := deliver(found, known, emit); err != nil {
		return err
	}
	return deliver(gone, known, emit)
}

// deliver emits vs in turn and records each in known.
func deliver(vs []policy.Version, known map[string]int64, emit func(policy.Version) error) error {
	for _, v := range vs {
		if err := emit(v); err != nil {
			return emitError{err}
		}
		if v.Deleted {
			delete(known, v.TenantID)
		} else {
			known[v.TenantID] = v.Version
		}
	}
	return nil
}
