package migrations_test

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/migrations"
)

// Replicas of the control plane and of analytics apply the migrations as
// they start, often at the same moment: every one of them succeeds, and
// the schema ends at the latest version, clean, each migration run once
// (a second run of a CREATE TABLE would have failed).
func TestApplyFromSeveralProcessesAtOnce(t *testing.T) {
	t.Parallel()
	u := pgtest.EmptySchema(t)
	const replicas = 4
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { errs[i] = migrations.Apply(u) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := migrations.Check(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var version int64
	if err := conn.QueryRow(ctx, `SELECT version FROM schema_migrations`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if want := latest(t); version != want {
		t.Fatalf("schema at version %d, want %d", version, want)
	}
}

// latest is the highest version among the migration files.
func latest(t *testing.T) int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migration files: %v %v", names, err)
	}
	var v int64
	for _, n := range names {
		num, _, _ := strings.Cut(n, "_")
		x, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		v = max(v, x)
	}
	return v
}
