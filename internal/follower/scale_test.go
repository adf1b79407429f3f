package follower

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// serveControlPlane serves store's control plane over HTTP/2 and TLS, to
// the deciders' key "decider", until the test ends.
func serveControlPlane(t testing.TB, store *pgstore.Store) *httptest.Server {
	cp := httptest.NewUnstartedServer(controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "decider"}.OnPostgres(store, time.Minute)))
	cp.EnableHTTP2 = true
	cp.StartTLS()
	t.Cleanup(cp.Close)
	return cp
}

// snapshotReads counts the snapshots read from PostgreSQL: each read
// queries the tenant's check keys once.
type snapshotReads struct{ n atomic.Int64 }

func (r *snapshotReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM api_keys WHERE tenant_id = $1 AND kind = 'check'") {
		r.n.Add(1)
	}
	return ctx
}

func (r *snapshotReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Twenty deciders follow one control plane (docs/scaling.md): each holds
// one watch stream, a change reaches all twenty through it, and their
// twenty pulls of the new snapshot are served by one read of PostgreSQL
// (the snapshot cache). Every decider then enforces the change.
func TestTwentyDecidersFollowOneControlPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	reads := &snapshotReads{}
	pc.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "fleet", Name: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := store.ListTiers(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	rule, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"},
		Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 10, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	cp := serveControlPlane(t, store)

	const deciders = 20
	enforced := make(chan int64, deciders*4)
	var followers []*Follower
	for range deciders {
		f, _, _ := startSyncerWith(t, Config{Client: sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL), PullTimeout: 20 * time.Second,
			OnChange: func(_, next *decide.Compiled) {
				if next != nil {
					enforced <- next.Version
				}
			}})
		followers = append(followers, f)
	}
	loaded := func(v int64) bool {
		for _, f := range followers {
			if c := f.Config(tn.ID); c == nil || c.Version < v {
				return false
			}
		}
		return true
	}
	_, v, err := store.GetTenant(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !loaded(v); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the deciders never all loaded the tenant")
		}
	}

	before := reads.n.Load()
	rule.Limit = 20
	if _, err := store.UpdateRule(ctx, "operator", tn.ID, rule, ""); err != nil {
		t.Fatal(err)
	}
	_, v, err = store.GetTenant(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Minute)
	for told := 0; told < deciders; {
		select {
		case got := <-enforced:
			if got >= v {
				told++
			}
		case <-timeout:
			t.Fatalf("%d of %d deciders enforced version %d", told, deciders, v)
		}
	}
	for i, f := range followers {
		c := f.Config(tn.ID)
		if rs := c.RuleNames()["default"]; c.Version < v || len(rs) != 1 {
			t.Fatalf("decider %d: version %d, rules %v", i, c.Version, rs)
		}
	}
	if n := reads.n.Load() - before; n != 1 {
		t.Errorf("%d deciders' pulls read the snapshot %d times, want once", deciders, n)
	}
}
