package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Version is one committed config version of a tenant, or its deletion.
type Version struct {
	TenantID string
	Version  int64
	Deleted  bool
}

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
// version order per tenant, until ctx ends or emit fails. It listens for
// notifications on a connection of its own and re-reads config_versions on
// each, and every Recheck; a dropped connection is reopened. Rolled-back
// changes are never delivered: they are neither in the table nor notified.
func (s *Store) Watch(ctx context.Context, cfg WatchConfig, emit func(Version) error) error {
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
func (s *Store) watchConn(ctx context.Context, cfg WatchConfig, known map[string]int64, emit func(Version) error) error {
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
// after known, and the deletion of known tenants that are gone.
func (s *Store) catchUp(ctx context.Context, tenant string, known map[string]int64, emit func(Version) error) error {
	ids := make([]string, 0, len(known))
	vers := make([]int64, 0, len(known))
	for id, v := range known {
		ids, vers = append(ids, id), append(vers, v)
	}
	rows, err := s.db.Query(ctx, `SELECT v.tenant_id::text, v.version FROM config_versions v
		LEFT JOIN unnest($1::uuid[], $2::bigint[]) AS k(id, ver) ON k.id = v.tenant_id
		WHERE ($3 = '' OR v.tenant_id::text = $3) AND v.version > coalesce(k.ver, 0)
		ORDER BY v.tenant_id, v.version`, ids, vers, tenant)
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) {
		var v Version
		return v, r.Scan(&v.TenantID, &v.Version)
	})
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	for _, v := range found {
		if err := emit(v); err != nil {
			return emitError{err}
		}
		known[v.TenantID] = v.Version
	}
	rows, err = s.db.Query(ctx, `SELECT k.id::text FROM unnest($1::uuid[]) AS k(id)
		WHERE ($2 = '' OR k.id::text = $2) AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = k.id)`, ids, tenant)
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgstore: watch: %w", err)
	}
	for _, id := range gone {
		if err := emit(Version{TenantID: id, Version: known[id] + 1, Deleted: true}); err != nil {
			return emitError{err}
		}
		delete(known, id)
	}
	return nil
}
