// Package pgtest gives each test its own migrated PostgreSQL schema, or a
// transaction rolled back when the test ends, on a real server:
// SLUICE_TEST_DATABASE_URL, else the local server on the default port, else
// a container when a Docker engine answers, else a private server started
// from the installed binaries (see sharedPrivate). Tests isolated this way
// run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgserver"
	"github.com/sluicehq/sluice/internal/testkit/containertest"
	"github.com/sluicehq/sluice/internal/testkit/filelock"
	"github.com/sluicehq/sluice/migrations"
)

// DefaultURL is the local server tests use when SLUICE_TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	baseOnce sync.Once
	base     string
	baseErr  error
)

// BaseURL returns the URL of the server tests use, starting a container
// when neither the configured nor the local server answers and Docker does.
func BaseURL(t testing.TB) string {
	t.Helper()
	baseOnce.Do(func() {
		base = os.Getenv("SLUICE_TEST_DATABASE_URL")
		if base == "" {
			base = DefaultURL
		}
		if baseErr = ping(base); baseErr == nil {
			return
		}
		if u, _, err := containertest.Postgres(context.Background()); err == nil {
			base, baseErr = u, nil // the container lives as long as the test process
			return
		}
		if os.Getenv("SLUICE_TEST_DATABASE_URL") == "" {
			if u, err := sharedPrivate(); err == nil {
				base, baseErr = u, nil
			} else {
				baseErr = fmt.Errorf("%w; and no private server: %w", baseErr, err)
			}
		}
	})
	if baseErr != nil {
		t.Fatalf("pgtest: PostgreSQL unreachable at %s (%v): start it, install it (Debian, Ubuntu: sudo apt-get install -y postgresql), or set SLUICE_TEST_DATABASE_URL", base, baseErr)
	}
	return base
}

func ping(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// schemaName returns a unique schema name that says which test made it.
func schemaName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	return fmt.Sprintf("t_%.40s_%s", name, hex.EncodeToString(b[:]))
}

// withSearchPath returns u with its connections' search_path set to schema.
func withSearchPath(u, schema string) string {
	p, err := url.Parse(u)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad database URL: %v", err))
	}
	q := p.Query()
	q.Set("search_path", schema)
	p.RawQuery = q.Encode()
	return p.String()
}

// Private starts a PostgreSQL server of the test's own, from the installed
// server binaries (pgserver), for a test that stops and restarts its
// database: never the shared one. The server and its data go when the
// test ends; the test is skipped where no server binaries are installed.
func Private(t testing.TB) *pgserver.Cluster {
	t.Helper()
	c, err := pgserver.Open(t.TempDir()) // as root, Open gives it and its parent to the postgres user
	if errors.Is(err, pgserver.ErrNoBinaries) {
		t.Skip("pgtest: no PostgreSQL server binaries to start a private server with")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// Schema creates a schema migrated to the latest version and returns a URL
// whose connections use it. The schema is dropped when the test ends.
func Schema(t testing.TB) string {
	t.Helper()
	u := EmptySchema(t)
	if err := migrations.Apply(u); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return u
}

// EmptySchema is Schema without the migrations: for a test of what applies
// them.
func EmptySchema(t testing.TB) string {
	t.Helper()
	b := BaseURL(t)
	schema := schemaName(t)
	exec(t, b, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { exec(t, b, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	return withSearchPath(b, schema)
}

// Pool returns a pool on a fresh migrated schema (see Schema), closed when
// the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), Schema(t))
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var (
	sharedOnce sync.Once
	shared     *pgxpool.Pool
	sharedName string
	sharedErr  error
)

// Tx returns a transaction on a migrated schema shared by the process's
// tests; it is rolled back when the test ends, so nothing a test writes is
// seen by another. Packages using Tx call Main from TestMain to drop the
// shared schema at exit.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	b := BaseURL(t)
	sharedOnce.Do(func() {
		var r [4]byte
		_, _ = rand.Read(r[:])
		sharedName = "pgtest_shared_" + hex.EncodeToString(r[:])
		if sharedErr = execErr(b, "CREATE SCHEMA "+sharedName); sharedErr != nil {
			return
		}
		u := withSearchPath(b, sharedName)
		if sharedErr = migrations.Apply(u); sharedErr != nil {
			return
		}
		shared, sharedErr = pgxpool.New(context.Background(), u)
	})
	if sharedErr != nil {
		t.Fatalf("pgtest: shared schema: %v", sharedErr)
	}
	tx, err := shared.Begin(context.Background())
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Main runs the package's tests, then drops the schema shared by Tx.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
		_ = execErr(base, "DROP SCHEMA "+sharedName+" CASCADE")
	}
	os.Exit(code)
}

func exec(t testing.TB, u, sql string) {
	t.Helper()
	if err := execErr(u, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

func execErr(u, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// sharedPrivate starts, or finds running, a PostgreSQL cluster of the
// tests' own in the temporary directory, from the installed binaries, and
// returns the URL of its test database. Every test process of a run shares
// it, started by the first under a lock, and it is left running for the
// next run: make test needs no server of its own, only PostgreSQL's
// binaries.
func sharedPrivate() (string, error) {
	parent := filepath.Join(os.TempDir(), "sluice-test-postgres")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	unlock, err := filelock.Lock(filepath.Join(parent, "lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	c, err := pgserver.Open(filepath.Join(parent, "cluster"))
	if err != nil {
		return "", err
	}
	u, err := c.Start()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'test')`).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE test`); err != nil {
			return "", err
		}
	}
	p, _ := url.Parse(u)
	p.Path = "/test"
	return p.String(), nil
}
