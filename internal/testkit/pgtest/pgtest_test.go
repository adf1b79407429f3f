package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { Main(m) }

func TestSchemaIsMigratedAndPrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := Pool(t), Pool(t)
	if _, err := a.Exec(ctx, `INSERT INTO tenants (slug, name) VALUES ('acme', 'Acme')`); err != nil {
		t.Fatalf("insert into a migrated schema: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("another test's schema sees %d tenants (err %v), want 0", n, err)
	}
	// The schema's constraints are in force.
	_, err := a.Exec(ctx, `INSERT INTO tenants (slug, name) VALUES ('acme', 'Acme again')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate slug: %v, want a unique violation", err)
	}
}

func TestSchemaIsDroppedAfterTheTest(t *testing.T) {
	t.Parallel()
	var url string
	t.Run("inner", func(t *testing.T) { url = Schema(t) })
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var exists bool
	err = c.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = current_schema())`).Scan(&exists)
	if err != nil || exists {
		t.Fatalf("schema still exists after its test (err %v)", err)
	}
}

func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var id string
	t.Run("writer", func(t *testing.T) {
		tx := Tx(t)
		if err := tx.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ('rolled-back', 'R') RETURNING id`).Scan(&id); err != nil {
			t.Fatal(err)
		}
	})
	tx := Tx(t)
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE id = $1`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a rolled-back row is visible: %d (err %v)", n, err)
	}
}

// A private server keeps its URL and its data across a restart.
func TestPrivateServerRestarts(t *testing.T) {
	t.Parallel()
	c := Private(t)
	ctx := context.Background()
	if err := execErr(c.URL(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if ping(c.URL()) == nil {
		t.Fatal("a stopped server answers")
	}
	if u, err := c.Start(); err != nil || u != c.URL() {
		t.Fatalf("restart: %s %v (was %s)", u, err, c.URL())
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after the restart: %d %v", v, err)
	}
}

// Where no server answers, the tests share a private one started from the
// installed binaries: the first process starts it, later ones (and later
// runs) find it running, with its test database.
func TestSharedPrivateServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	first, err := sharedPrivate()
	if err != nil {
		t.Skipf("no private PostgreSQL here: %v", err)
	}
	if err := ping(first); err != nil {
		t.Fatalf("the shared private server's test database %s: %v", first, err)
	}
	again, err := sharedPrivate()
	if err != nil || again != first {
		t.Fatalf("a second look: %s %v, want the running %s", again, err, first)
	}
}
