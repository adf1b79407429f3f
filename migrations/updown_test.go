package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/migrations"
)

// migrator returns golang-migrate on the migrations, for the database at
// u (a postgres:// URL), closed when the test ends.
func migrator(t *testing.T, u string) *migrate.Migrate {
	t.Helper()
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, "pgx5://"+strings.TrimPrefix(u, "postgres://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Every migration's down undoes its up: each is applied, rolled back and
// applied again in turn (an up whose objects its down left behind fails the
// second time), and from the latest version the whole schema goes down to
// nothing but golang-migrate's own table, and up again.
func TestEveryMigrationGoesDownAndUpAgain(t *testing.T) {
	t.Parallel()
	u := pgtest.EmptySchema(t)
	m := migrator(t, u)
	for v := int64(1); v <= latest(t); v++ {
		for _, step := range []int{1, -1, 1} {
			if err := m.Steps(step); err != nil {
				t.Fatalf("migration %d, step %+d: %v", v, step, err)
			}
		}
	}
	if err := m.Down(); err != nil {
		t.Fatalf("down from the latest: %v", err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left []string
	rows, err := conn.Query(ctx, `SELECT c.relname || ' (' || c.relkind::text || ')' FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relname NOT LIKE 'schema_migrations%' ORDER BY 1`)
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(left) != 0 {
		t.Fatalf("left after every down: %v %v", left, err)
	}
	var types int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = current_schema() AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0`).Scan(&types); err != nil || types != 0 {
		t.Fatalf("types left after every down: %d %v", types, err)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := migrations.Check(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

// Tenants that exist when migration 24 adds config stamps each get one of
// their own, never 0 (0 stands for "unknown" to deciders).
func TestConfigStampsOfExistingTenants(t *testing.T) {
	t.Parallel()
	u := pgtest.EmptySchema(t)
	m := migrator(t, u)
	if err := m.Migrate(23); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO tenants (slug, name) SELECT 't' || i, 'T' || i FROM generate_series(1, 50) AS i`); err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(24); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		t.Fatal(err)
	}
	var n, distinct, zero int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT config_stamp), count(*) FILTER (WHERE config_stamp = 0) FROM tenants`).Scan(&n, &distinct, &zero); err != nil {
		t.Fatal(err)
	}
	if n != 50 || distinct != 50 || zero != 0 {
		t.Fatalf("%d tenants with %d distinct stamps, %d of them 0", n, distinct, zero)
	}
}
