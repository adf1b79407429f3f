// Package migrations embeds the PostgreSQL schema migrations and applies
// them with golang-migrate. Files are NNNNNN_name.up.sql and
// NNNNNN_name.down.sql; a migration, once released, is never edited.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/redact"
)

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS

// Apply applies every pending migration to the database at dsn, a
// postgres:// URL (a search_path parameter selects the schema). It is safe
// to call from several processes at once: golang-migrate holds an advisory
// lock per database and schema.
func Apply(dsn string) error {
	src, err := iofs.New(FS, ".")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL(dsn))
	if err != nil { // golang-migrate quotes the URL, password and all
		return fmt.Errorf("migrations: %w", redact.Error(err, migrateURL(dsn)))
	}
	defer m.Close()
	if err := checkServer(dsn); err != nil {
		return err
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrations: up: %w", redact.Error(err, migrateURL(dsn)))
	}
	return nil
}

// MinServerVersion is the oldest PostgreSQL the migrations run on, as
// server_version_num: 14, for date_bin (migration 25).
const MinServerVersion = 140000

// checkServer refuses a server older than MinServerVersion with an error
// that says so, where a migration would fail halfway on a missing function.
func checkServer(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("migrations: %w", redact.Error(err, dsn))
	}
	defer conn.Close(ctx)
	var version int
	var name string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&version, &name); err != nil {
		return fmt.Errorf("migrations: server version: %w", err)
	}
	return tooOld(version, name)
}

func tooOld(version int, name string) error {
	if version < MinServerVersion {
		return fmt.Errorf("migrations: PostgreSQL %d or later is needed; the server is %s", MinServerVersion/10000, name)
	}
	return nil
}

// migrateURL turns a postgres:// URL into golang-migrate's pgx5:// form.
func migrateURL(dsn string) string {
	for _, p := range []string{"postgresql://", "postgres://"} {
		if rest, ok := strings.CutPrefix(dsn, p); ok {
			return "pgx5://" + rest
		}
	}
	return dsn
}

// Querier is what Check needs of a connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check reports whether the database behind q answers with a migrated
// schema that no failed migration left dirty: the readiness of a binary
// that works on it.
func Check(ctx context.Context, q Querier) error {
	var version int64
	var dirty bool
	if err := q.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty); err != nil {
		return fmt.Errorf("migrations: check: %w", err)
	}
	if dirty {
		return fmt.Errorf("migrations: version %d is dirty (a migration failed)", version)
	}
	return nil
}
