// Package pgstore is Sluice's PostgreSQL store on a pgx/v5 pool. It
// translates PostgreSQL errors into policy errors at its edge.
package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/sluicehq/sluice/migrations"
)

// Migrate applies every pending embedded migration to the database at dsn,
// a postgres:// URL (a search_path parameter selects the schema). It is
// safe to call from several processes at once: golang-migrate holds an
// advisory lock per database and schema.
func Migrate(dsn string) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("pgstore: migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL(dsn))
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pgstore: migrate up: %w", err)
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
