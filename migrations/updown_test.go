package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
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

// migratedTo returns golang-migrate on a schema of its own, migrated to
// version, and a connection to it, closed when the test ends.
func migratedTo(t *testing.T, version uint) (*migrate.Migrate, *pgx.Conn) {
	t.Helper()
	u := pgtest.EmptySchema(t)
	m := migrator(t, u)
	if err := m.Migrate(version); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return m, conn
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
	m, conn := migratedTo(t, 23)
	ctx := context.Background()
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

// Minutes rolled up before migration 25 adds the hourly rollups are summed
// into their hours: reports that read an hour's row see what its minutes
// held.
func TestHoursOfExistingMinutes(t *testing.T) {
	t.Parallel()
	m, conn := migratedTo(t, 24)
	ctx := context.Background()
	// 90 minutes from 10:00 of two rules; the second hour holds 30 of them.
	if _, err := conn.Exec(ctx, `INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed, rejected,
			shadow_rejected, rejection_events, shadow_events, dropped_rejections)
		SELECT 't', timestamptz '2026-11-22 10:00:00Z' + i * interval '1 minute', 'free', r, i, 1, 2, 3, 4, 5
		FROM generate_series(0, 89) AS i, unnest(array['r1', 'r2']) AS r`); err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(25); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT concat_ws(' ', rule_id, extract(hour FROM hour AT TIME ZONE 'UTC'), allowed,
			rejected, shadow_rejected, rejection_events, shadow_events, dropped_rejections)
		FROM analytics_hour WHERE tenant_id = 't' AND tier = 'free' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	text, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// allowed: 0+…+59 = 1770 in the first hour, 60+…+89 = 2235 in the second.
	want := []string{"r1 10 1770 60 120 180 240 300", "r1 11 2235 30 60 90 120 150",
		"r2 10 1770 60 120 180 240 300", "r2 11 2235 30 60 90 120 150"}
	if strings.Join(text, "\n") != strings.Join(want, "\n") {
		t.Fatalf("hours:\n%s\nwant:\n%s", strings.Join(text, "\n"), strings.Join(want, "\n"))
	}
	// Minutes written since, as any release's consumer writes them, add to
	// their hours; pruned minutes leave theirs.
	if _, err := conn.Exec(ctx, `INSERT INTO analytics_minute AS m (tenant_id, minute, tier, rule_id, allowed, rejected)
		VALUES ('t', '2026-11-22 10:00:00Z', 'free', 'r1', 5, 1), ('t', '2026-11-22 12:59:00Z', 'free', 'r1', 7, 0)
		ON CONFLICT (tenant_id, minute, tier, rule_id) DO UPDATE SET
			allowed = m.allowed + excluded.allowed, rejected = m.rejected + excluded.rejected;
		DELETE FROM analytics_minute WHERE minute < '2026-11-22 11:00:00Z'`); err != nil {
		t.Fatal(err)
	}
	var tenOClock, noon string
	if err := conn.QueryRow(ctx, `SELECT
			(SELECT concat_ws(' ', allowed, rejected) FROM analytics_hour WHERE rule_id = 'r1' AND hour = '2026-11-22 10:00:00Z'),
			(SELECT concat_ws(' ', allowed, rejected) FROM analytics_hour WHERE rule_id = 'r1' AND hour = '2026-11-22 12:00:00Z')`).
		Scan(&tenOClock, &noon); err != nil {
		t.Fatal(err)
	}
	if tenOClock != "1775 61" || noon != "7 0" {
		t.Fatalf("hours of r1 at 10:00 %q, want \"1775 61\"; at 12:00 %q, want \"7 0\"", tenOClock, noon)
	}
}

// Top clients stored before migration 27 adds their days are summed into
// them: a report that reads a day's rows sees what its hours held.
func TestDaysOfExistingTopClients(t *testing.T) {
	t.Parallel()
	m, conn := migratedTo(t, 26)
	addTopClientsOfTwoDays(t, conn)
	if err := m.Migrate(27); err != nil {
		t.Fatal(err)
	}
	// alice's errors: 0+…+3 = 6 on the 22nd, 4+…+27 = 372 on the 23rd; rejected 2 more an hour.
	if got, want := topClientsDays(t, conn), "alice 22 14 6, alice 23 420 372, bob 22 9 0"; got != want {
		t.Fatalf("days: %s, want %s", got, want)
	}
}

// addTopClientsOfTwoDays stores alice's top clients' rows in each of 28
// hours from 2026-11-22 20:00 (4 that day, 24 the next), rejected i+2 and
// error i in the i-th, and bob's in the first, rejected 9.
func addTopClientsOfTwoDays(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected, error)
		SELECT 't', 'r1', timestamptz '2026-11-22 20:00:00Z' + i * interval '1 hour', 'alice', i + 2, i
		FROM generate_series(0, 27) AS i
		UNION ALL SELECT 't', 'r1', '2026-11-22 20:00:00Z', 'bob', 9, 0`); err != nil {
		t.Fatal(err)
	}
}

// topClientsDays returns the top clients' days' rows as "client day-of-
// month rejected error", comma-separated.
func topClientsDays(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT concat_ws(' ', client_key, extract(day FROM day AT TIME ZONE 'UTC'), rejected, error)
		FROM analytics_top_clients_day ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	text, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(text, ", ")
}

// Migration 29's down brings back 27's rule that a day holds the sums of
// its hours kept: the days whose hours analytics pruned are summed again
// from what is left of them.
func TestDaysOfPrunedHoursDown(t *testing.T) {
	t.Parallel()
	m, conn := migratedTo(t, 29)
	ctx := context.Background()
	// As in TestDaysOfExistingTopClients, summed into their days as they
	// are written (migration 27 marked the days before today summed), then
	// the hours before 2026-11-23 02:00 pruned as analytics prunes them.
	addTopClientsOfTwoDays(t, conn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('sluice.keep_days', 'on', true);
		UPDATE analytics_top_clients_days SET hours_from = '2026-11-23 02:00:00Z';
		DELETE FROM analytics_top_clients WHERE hour < '2026-11-23 02:00:00Z'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := topClientsDays(t, conn), "alice 22 14 6, alice 23 420 372, bob 22 9 0"; got != want {
		t.Fatalf("days after pruning their hours: %s, want %s", got, want)
	}
	if err := m.Migrate(28); err != nil {
		t.Fatal(err)
	}
	// alice's hours 6…27 are left: rejected 8+…+29 = 407, errors 6+…+27 = 363.
	if got, want := topClientsDays(t, conn), "alice 23 407 363"; got != want {
		t.Fatalf("days after migration 29 went down: %s, want %s", got, want)
	}
}

// Migration 31 holds top clients' counts past 2^49 at it, hours and days,
// and their days follow their hours.
func TestTopClientsPastTheBoundAreHeld(t *testing.T) {
	t.Parallel()
	m, conn := migratedTo(t, 30)
	ctx := context.Background()
	// Summed into its day as it is written (migration 27 marked the days
	// before today summed): a wrapped sum, and a day past its bound.
	if _, err := conn.Exec(ctx, `INSERT INTO analytics_top_clients (tenant_id, rule_id, hour, client_key, rejected, error)
		VALUES ('t', 'r1', '2026-11-22 20:00:00Z', 'z', 9223372036854775805, 9000000000000000000),
			('t', 'r1', '2026-11-22 21:00:00Z', 'alice', 7, 2)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO analytics_top_clients_day (tenant_id, rule_id, day, client_key, rejected, error)
		VALUES ('t', 'r1', '2026-10-01 00:00:00Z', 'y', 9223372036854775807, 5)`); err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(31); err != nil {
		t.Fatal(err)
	}
	var hour string
	if err := conn.QueryRow(ctx, `SELECT concat_ws(' ', rejected, error) FROM analytics_top_clients WHERE client_key = 'z'`).Scan(&hour); err != nil {
		t.Fatal(err)
	}
	if want := "562949953421312 562949953421311"; hour != want {
		t.Fatalf("z's hour %s, want %s", hour, want)
	}
	if got, want := topClientsDays(t, conn), "alice 22 7 2, y 1 13510798882111488 5, z 22 562949953421312 562949953421311"; got != want {
		t.Fatalf("days %s, want %s", got, want)
	}
}
