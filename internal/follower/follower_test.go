package follower

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/decide"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// eventually polls cond until it holds or 20 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func authenticates(k *Keys, secret string) bool {
	_, err := k.Authenticate("Bearer " + secret)
	return err == nil
}

// startSyncer runs a Follower; the returned stop cancels it and waits until
// Run has returned (a pull in flight, its state file written).
func startSyncer(t *testing.T, client sluicev1connect.ConfigServiceClient, state string) (*Follower, *Keys, func()) {
	t.Helper()
	return startSyncerWith(t, Config{Client: client, StateFile: state})
}

// startSyncerWith is startSyncer of cfg, with the test's key, key table
// and intervals (cfg's pull timeout, when it has one).
func startSyncerWith(t testing.TB, cfg Config) (*Follower, *Keys, func()) {
	t.Helper()
	keys := NewKeys()
	cfg.Key, cfg.Keys, cfg.Repull = "decider", keys, time.Minute
	if cfg.PullTimeout == 0 {
		cfg.PullTimeout = 2 * time.Second
	}
	s := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return s, keys, stop
}

func TestSyncFollowsTheControlPlaneAndSurvivesItsAbsence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.Pool(t))
	cp := serveControlPlane(t, store)
	client := sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL)

	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(ctx, tn.ID)
	rule := policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}}
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, rule); err != nil {
		t.Fatal(err)
	}
	keep, _, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "keep")
	revoke, revokeKey, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "revoke")

	state := filepath.Join(t.TempDir(), "snapshot.pb")
	s, keys, stop := startSyncer(t, client, state)
	select {
	case <-s.Loaded(): // the gRPC health service's signal
	case <-time.After(20 * time.Second):
		t.Fatal("Loaded never closed")
	}
	if !s.Ready() {
		t.Fatal("Loaded closed before Ready")
	}
	eventually(t, "ready with the tenant", func() bool { return s.Ready() && s.Config(tn.ID) != nil })
	_, v, _ := store.GetTenant(ctx, tn.ID)
	if got := s.Config(tn.ID).Version; got != v {
		t.Fatalf("enforcing version %d, the control plane is at %d", got, v)
	}
	if !authenticates(keys, keep) || !authenticates(keys, revoke) {
		t.Fatal("check keys of the snapshot do not authenticate")
	}

	// Changes arrive through the watch: a new rule, a revoked key.
	rule.Name = "global"
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, rule); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RevokeKey(ctx, "operator", tn.ID, revokeKey.ID); err != nil {
		t.Fatal(err)
	}
	_, v, _ = store.GetTenant(ctx, tn.ID)
	eventually(t, "the new version enforced", func() bool { return s.Config(tn.ID).Version == v })
	if authenticates(keys, revoke) || !authenticates(keys, keep) {
		t.Fatal("after the revocation")
	}
	// The state file follows while the decider runs, not only when it
	// stops: a decider killed keeps what it last pulled.
	eventually(t, "the new version on disk", func() bool {
		b, err := os.ReadFile(state)
		var saved sluicev1.GetSnapshotsResponse
		return err == nil && proto.Unmarshal(b, &saved) == nil && len(saved.Snapshots) == 1 && saved.Snapshots[0].GetVersion() == v
	})

	// The control plane goes away: the decider keeps enforcing. (Drop the
	// connections first: Close waits for the open watch stream otherwise.)
	cp.CloseClientConnections()
	cp.Close()
	if !authenticates(keys, keep) || s.Config(tn.ID).Version != v {
		t.Fatal("the last config was dropped when the control plane went away")
	}
	stop()

	// A decider restarted while the control plane is down starts from disk.
	s2, keys2, _ := startSyncer(t, client, state)
	eventually(t, "ready from the on-disk snapshot", s2.Ready)
	if c := s2.Config(tn.ID); c == nil || c.Version != v || !authenticates(keys2, keep) || authenticates(keys2, revoke) {
		t.Fatalf("restarted from disk: %+v", c)
	}
}

// The check keys a decider accepts are reported with its next pull: the
// control plane records their use, and only theirs.
func TestSyncReportsTheCheckKeysUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.Pool(t))
	cp := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "decider"}.OnPostgres(store, time.Minute)))
	defer func() { cp.CloseClientConnections(); cp.Close() }()
	client := sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL)

	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	used, usedKey, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "used")
	_, idleKey, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "idle")
	s, keys, _ := startSyncer(t, client, "")
	eventually(t, "ready with the tenant", func() bool { return s.Ready() && s.Config(tn.ID) != nil })
	if !authenticates(keys, used) {
		t.Fatal("the check key does not authenticate")
	}
	// A change makes the decider pull (through the watch) at once.
	if _, _, err := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "another"); err != nil {
		t.Fatal(err)
	}
	lastUsed := func() map[string]time.Time {
		ks, err := store.ListKeys(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, k := range ks {
			out[k.ID] = k.LastUsedAt
		}
		return out
	}
	eventually(t, "the used key's use recorded", func() bool { return !lastUsed()[usedKey.ID].IsZero() })
	if at := lastUsed()[idleKey.ID]; !at.IsZero() {
		t.Fatalf("an unused key recorded as used at %v", at)
	}
	if left := keys.TakeUsed(100); len(left) != 0 {
		t.Fatalf("%d uses left to report after the pull", len(left))
	}
}

// TakeUsed reports each used key once; MarkUsed puts back what could not
// be reported; a new config of the tenant keeps its keys' use.
func TestKeysTrackUse(t *testing.T) {
	t.Parallel()
	keys := NewKeys()
	c := &decide.Compiled{Tenant: policy.Tenant{ID: "t1"}}
	a, b := policy.HashKey("a"), policy.HashKey("b")
	keys.SetTenant("t1", []policy.CheckKey{{Hash: a}, {Hash: b}}, c)
	if got := keys.TakeUsed(100); len(got) != 0 {
		t.Fatalf("unused keys reported: %d", len(got))
	}
	if _, err := keys.Lookup(a); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Lookup(b); err != nil {
		t.Fatal(err)
	}
	// At most max at a time: the other use stays for the next call.
	one := keys.TakeUsed(1)
	if len(one) != 1 {
		t.Fatalf("TakeUsed(1) = %d hashes", len(one))
	}
	if rest := keys.TakeUsed(100); len(rest) != 1 || rest[0] == one[0] {
		t.Fatalf("after TakeUsed(1): %x, then %x", one, rest)
	}
	if _, err := keys.Lookup(a); err != nil {
		t.Fatal(err)
	}
	keys.SetTenant("t1", []policy.CheckKey{{Hash: a}, {Hash: b}}, &decide.Compiled{Tenant: policy.Tenant{ID: "t1"}})
	got := keys.TakeUsed(100)
	if len(got) != 1 || got[0] != a {
		t.Fatalf("TakeUsed = %x, want a's hash", got)
	}
	if len(keys.TakeUsed(100)) != 0 {
		t.Fatal("a use reported twice")
	}
	keys.MarkUsed(got)
	if again := keys.TakeUsed(100); len(again) != 1 || again[0] != a {
		t.Fatalf("after MarkUsed: %x", again)
	}
}

// A tenant in shadow (policy.Tenant.Shadow) reaches the decider with its
// snapshot: its rules report what they would reject and reject nothing,
// until the tenant leaves shadow, which the next version enforces.
func TestTenantShadowReachesTheDecider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.Pool(t))
	cp := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "decider"}.OnPostgres(store, time.Minute)))
	t.Cleanup(func() { cp.CloseClientConnections(); cp.Close() })
	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme", Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(ctx, tn.ID)
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, policy.Rule{Name: "one", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	s, _, _ := startSyncer(t, sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL), filepath.Join(t.TempDir(), "snapshot.pb"))
	_, v, _ := store.GetTenant(ctx, tn.ID)
	eventually(t, "the tenant enforced", func() bool { c := s.Config(tn.ID); return c != nil && c.Version == v })

	d := decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	req := decide.Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "alice"}}}
	decideOnce := func() (allowed, wouldReject bool) {
		t.Helper()
		dec, err := d.Decide(ctx, s.Config(tn.ID), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dec.Rules {
			wouldReject = wouldReject || !r.Allowed
		}
		return dec.Allowed, wouldReject
	}
	for i, wantWould := range []bool{false, true, true} {
		if ok, would := decideOnce(); !ok || would != wantWould {
			t.Fatalf("in shadow, decision %d: allowed %v, would reject %v; want allowed, would reject %v", i+1, ok, would, wantWould)
		}
	}

	tn.Shadow = false
	if v, err = store.UpdateTenant(ctx, "operator", tn, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant out of shadow", func() bool { return s.Config(tn.ID).Version == v })
	if ok, _ := decideOnce(); ok {
		t.Fatal("out of shadow, a request over the limit was admitted")
	}
}

// A check key is refused from its expiry on, by the decider's clock, with
// no new config version needed.
func TestCheckKeyExpires(t *testing.T) {
	t.Parallel()
	keys := NewKeys()
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	now := at.Add(-time.Nanosecond)
	keys.now = func() time.Time { return now }
	c := &decide.Compiled{Tenant: policy.Tenant{ID: "t1"}}
	forever, trial := policy.HashKey("forever"), policy.HashKey("trial")
	keys.SetTenant("t1", []policy.CheckKey{{Hash: forever}, {Hash: trial, ExpiresAt: at}}, c)
	if _, err := keys.Lookup(trial); err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	now = at
	if _, err := keys.Lookup(trial); policy.ErrorCode(err) != policy.CodeUnauthenticated {
		t.Fatalf("at its expiry: %v, want Unauthenticated", err)
	}
	if _, err := keys.Lookup(forever); err != nil {
		t.Fatalf("a key without expiry: %v", err)
	}
	// A new config that no longer says the key expires lifts it.
	keys.SetTenant("t1", []policy.CheckKey{{Hash: trial}}, c)
	if _, err := keys.Lookup(trial); err != nil {
		t.Fatalf("after a config without the expiry: %v", err)
	}
}

// A snapshot that does not compile (here two rules of one id, which would
// count each request twice) is refused and counted, and the tenant's
// previous config stays in force, its version the one enforced.
func TestRefusedSnapshotKeepsThePrevious(t *testing.T) {
	t.Parallel()
	s := New(Config{Keys: NewKeys()})
	rule := policy.Rule{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}}
	snap := &policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 3,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule}}}}
	s.apply([]*sluicev1.Snapshot{protoconv.SnapshotToProto(snap, nil)}, nil)
	bad := *snap
	twin := rule
	twin.Name = "twin"
	bad.Version, bad.Tiers = 4, []policy.Tier{{Name: "free", Rules: []policy.Rule{rule, twin}}}
	s.apply([]*sluicev1.Snapshot{protoconv.SnapshotToProto(&bad, nil)}, nil)
	if got := s.Versions()["t1"]; got != 3 || s.Refused() != 1 || s.Config("t1") == nil || s.Config("t1").Version != 3 {
		t.Fatalf("version %d enforced, %d refused; want 3 and 1", got, s.Refused())
	}
}

// A decider restarted while the control plane is down starts from its
// state file. When the database went back meanwhile (a backup restored)
// and moved on to the very version the file holds, the file's
// configuration is one the database lost: the decider takes the
// database's once the control plane answers, though the versions agree.
func TestSyncLeavesAConfigurationTheDatabaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.Pool(t))
	var down atomic.Bool
	down.Store(true)
	h := controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "decider"}.OnPostgres(store, time.Minute))
	cp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	cp.EnableHTTP2 = true
	cp.StartTLS()
	t.Cleanup(func() { cp.CloseClientConnections(); cp.Close() })
	client := sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL)

	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	snap, keys, err := store.Snapshot(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	lost := *snap
	lost.Tenant.Name, lost.Stamp = "Acme as the database lost it", snap.Stamp^1
	b, err := proto.Marshal(&sluicev1.GetSnapshotsResponse{Snapshots: []*sluicev1.Snapshot{protoconv.SnapshotToProto(&lost, keys)}})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "snapshot.pb")
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	s, _, stop := startSyncerWith(t, Config{Client: client, StateFile: state, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	eventually(t, "ready from the state file", s.Ready)
	if c := s.Config(tn.ID); c == nil || c.Version != snap.Version || c.Tenant.Name != lost.Tenant.Name {
		t.Fatalf("started from the state file: %+v", c)
	}
	down.Store(false)
	eventually(t, "the database's configuration", func() bool { return s.Config(tn.ID).Tenant.Name == "Acme" })
	if v := s.Config(tn.ID).Version; v != snap.Version {
		t.Fatalf("enforcing version %d, the database's is %d", v, snap.Version)
	}
	stop() // its logs written
	if !strings.Contains(logs.String(), "the control plane's database went back") {
		t.Errorf("the decider did not say the database went back:\n%s", logs.String())
	}
}

// Until its first configuration a decider knows no key: a check then is
// unavailable (retry; the callers' failure modes apply), not refused as a
// bad key, which callers would not retry. From the first configuration
// on, an unknown key is refused.
func TestKeysUnavailableUntilTheFirstConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.Pool(t))
	release := make(chan struct{})
	handler := controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "decider"}.OnPostgres(store, time.Minute))
	cp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the control plane answers nothing until released
		case <-release:
		case <-r.Context().Done():
			return
		}
		handler.ServeHTTP(w, r)
	}))
	cp.EnableHTTP2 = true
	cp.StartTLS()
	t.Cleanup(cp.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the server closes: its handlers wait on it

	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	key, _, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "app")
	s, keys, _ := startSyncer(t, sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL), filepath.Join(t.TempDir(), "snapshot.pb"))
	if _, err := keys.Authenticate("Bearer " + key); policy.ErrorCode(err) != policy.CodeUnavailable || s.Ready() {
		t.Fatalf("before any configuration: %v (ready %v), want unavailable", err, s.Ready())
	}
	open()
	eventually(t, "ready", s.Ready)
	if !authenticates(keys, key) {
		t.Fatal("the tenant's key, once configured, does not authenticate")
	}
	if _, err := keys.Authenticate("Bearer sk_check_nobodys"); policy.ErrorCode(err) != policy.CodeUnauthenticated {
		t.Fatalf("an unknown key once configured: %v, want unauthenticated", err)
	}
}

// OnChange hears of every tenant whose configuration a pull replaced or
// removed, with the old and the new (nil when removed), and of no other.
func TestOnChangeTellsWhatChanged(t *testing.T) {
	type change struct {
		tenant    string
		old, next int64
	} // versions; 0: none
	var got []change
	version := func(c *decide.Compiled) int64 {
		if c == nil {
			return 0
		}
		return c.Version
	}
	s := New(Config{Keys: NewKeys(), OnChange: func(old, next *decide.Compiled) {
		got = append(got, change{old.Tenant.ID, version(old), version(next)})
	}})
	snap := func(id string, v int64) *sluicev1.Snapshot {
		return protoconv.SnapshotToProto(&policy.Snapshot{Tenant: policy.Tenant{ID: id, Slug: "s" + id, Name: id, DefaultTier: "free"}, Version: v,
			Tiers: []policy.Tier{{Name: "free"}}}, nil)
	}
	s.apply([]*sluicev1.Snapshot{snap("a", 1), snap("b", 1)}, nil)
	if len(got) != 0 {
		t.Fatalf("first configurations: %v, want no change told", got)
	}
	s.apply([]*sluicev1.Snapshot{snap("a", 2)}, nil)
	s.apply(nil, []string{"b"})
	if want := []change{{"a", 1, 2}, {"b", 1, 0}}; !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
}
