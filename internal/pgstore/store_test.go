package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

const op policy.Actor = "operator"

func newStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	return New(pool), pool
}

func newTenant(t *testing.T, s *Store, slug string) policy.Tenant {
	t.Helper()
	tn, err := s.CreateTenant(context.Background(), op, policy.Tenant{Slug: slug, Name: "Tenant " + slug})
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func rule(name string, limit int64) policy.Rule {
	return policy.Rule{Name: name, KeyBy: []string{"client_id"}, Enabled: true,
		Match:  []policy.Match{{Key: "route", Value: "/login"}},
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: limit, Window: time.Minute, Burst: 3}}
}

// wantCode fails unless err carries code (and, when field is set, a field
// error on it).
func wantCode(t *testing.T, err error, code policy.Code, field string) {
	t.Helper()
	var e *policy.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	if field != "" && !slices.ContainsFunc(e.Fields, func(f policy.FieldError) bool { return f.Field == field }) {
		t.Fatalf("error %v has no field error on %s", err, field)
	}
}

func TestTenantCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme := newTenant(t, s, "acme")
	if acme.ID == "" || acme.DefaultTier != "default" {
		t.Fatalf("created %+v", acme)
	}
	got, v, err := s.GetTenant(ctx, acme.ID)
	if err != nil || got != acme || v != 1 {
		t.Fatalf("get: %+v v%d %v", got, v, err)
	}
	if got, _, err := s.GetTenantBySlug(ctx, "acme"); err != nil || got.ID != acme.ID {
		t.Fatalf("by slug: %+v %v", got, err)
	}
	_, err = s.CreateTenant(ctx, op, policy.Tenant{Slug: "acme", Name: "Again"})
	wantCode(t, err, policy.CodeConflict, "slug")
	_, err = s.CreateTenant(ctx, op, policy.Tenant{Slug: "Bad Slug", Name: ""})
	wantCode(t, err, policy.CodeInvalid, "slug")
	wantCode(t, err, policy.CodeInvalid, "name")

	acme.Name, acme.Status = "Acme Corp", policy.TenantSuspended
	if v, err := s.UpdateTenant(ctx, op, acme, ""); err != nil || v != 2 {
		t.Fatalf("update: v%d %v", v, err)
	}
	bad := acme
	bad.Slug = "other"
	_, err = s.UpdateTenant(ctx, op, bad, "")
	wantCode(t, err, policy.CodeInvalid, "slug")
	bad = acme
	bad.DefaultTier = "gold"
	_, err = s.UpdateTenant(ctx, op, bad, "")
	wantCode(t, err, policy.CodeInvalid, "default_tier")

	newTenant(t, s, "beta")
	list, err := s.ListTenants(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "Acme Corp" || list[0].Status != policy.TenantSuspended {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.DeleteTenant(ctx, op, acme.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetTenant(ctx, acme.ID)
	wantCode(t, err, policy.CodeNotFound, "")
	_, _, err = s.GetTenant(ctx, "not-a-uuid")
	wantCode(t, err, policy.CodeNotFound, "")
	audit, err := s.ListAudit(ctx, acme.ID, 0, 10, "")
	if err != nil || len(audit) != 3 || audit[0].Action != "delete" || audit[2].Action != "create" {
		t.Fatalf("the audit log must outlive the tenant: %+v %v", audit, err)
	}
}

func TestTiersAndRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme, other := newTenant(t, s, "acme"), newTenant(t, s, "other")
	pro, v, err := s.CreateTier(ctx, op, acme.ID, "pro")
	if err != nil || v != 2 {
		t.Fatalf("create tier: v%d %v", v, err)
	}
	_, _, err = s.CreateTier(ctx, op, acme.ID, "pro")
	wantCode(t, err, policy.CodeConflict, "name")

	var ids []string
	for i, name := range []string{"a", "b", "c"} {
		r, v, err := s.CreateRule(ctx, op, acme.ID, pro.ID, rule(name, int64(10+i)))
		if err != nil || v != int64(3+i) {
			t.Fatalf("create rule %s: v%d %v", name, v, err)
		}
		ids = append(ids, r.ID)
	}
	_, _, err = s.CreateRule(ctx, op, acme.ID, pro.ID, rule("a", 5))
	wantCode(t, err, policy.CodeConflict, "name")
	bad := rule("bad", 0)
	bad.Granularity = time.Second
	_, _, err = s.CreateRule(ctx, op, acme.ID, pro.ID, bad)
	wantCode(t, err, policy.CodeInvalid, "limit")
	wantCode(t, err, policy.CodeInvalid, "granularity")
	// Another tenant cannot reach this tier, or this tenant's rules.
	_, _, err = s.CreateRule(ctx, op, other.ID, pro.ID, rule("x", 1))
	wantCode(t, err, policy.CodeNotFound, "")
	_, err = s.DeleteRule(ctx, op, other.ID, ids[0])
	wantCode(t, err, policy.CodeNotFound, "")

	upd := rule("b2", 99)
	upd.ID, upd.Shadow, upd.FailureMode, upd.Block, upd.Quota = ids[1], true, policy.FailLocal, true, true
	changed, err := s.UpdateRule(ctx, op, acme.ID, upd, "")
	if err != nil {
		t.Fatal(err)
	}
	// The same update again changes nothing: no version, no audit row.
	if v, err := s.UpdateRule(ctx, op, acme.ID, upd, ""); err != nil || v != changed {
		t.Fatalf("an update changing nothing: v%d %v, want v%d kept", v, err, changed)
	}
	if audit, err := s.ListAudit(ctx, acme.ID, 0, 1, ""); err != nil || len(audit) != 1 || audit[0].Version != changed {
		t.Fatalf("the latest audit entry after an update changing nothing: %+v %v, want v%d's", audit, err, changed)
	}
	if _, err := s.ReorderRules(ctx, op, acme.ID, pro.ID, []string{ids[2], ids[0], ids[1]}); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReorderRules(ctx, op, acme.ID, pro.ID, []string{ids[2], ids[0]})
	wantCode(t, err, policy.CodeInvalid, "rule_ids")
	rules, err := s.ListRules(ctx, acme.ID, pro.ID)
	if err != nil || len(rules) != 3 {
		t.Fatalf("list: %v", err)
	}
	if names := []string{rules[0].Name, rules[1].Name, rules[2].Name}; !slices.Equal(names, []string{"c", "a", "b2"}) {
		t.Fatalf("order %v", names)
	}
	if got := rules[2]; got.Limit != 99 || !got.Shadow || !got.Block || !got.Quota || rules[0].Quota || rules[0].Block || got.FailureMode != policy.FailLocal || got.Burst != 3 ||
		got.Window != time.Minute || !slices.Equal(got.KeyBy, []string{"client_id"}) || got.Match[0] != (policy.Match{Key: "route", Value: "/login"}) {
		t.Fatalf("round trip: %+v", got)
	}
	// A calendar window round-trips, and turns back into a plain one; its
	// scope global with it.
	monthly := rule("monthly", 1000)
	monthly.Algorithm, monthly.Burst, monthly.Window, monthly.Calendar, monthly.Scope = policy.FixedWindow, 0, 0, policy.CalendarMonth, policy.ScopeGlobal
	monthly, _, err = s.CreateRule(ctx, op, acme.ID, pro.ID, monthly)
	if err != nil {
		t.Fatal(err)
	}
	calendarOf := func() policy.Params {
		t.Helper()
		rules, err := s.ListRules(ctx, acme.ID, pro.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.ID == monthly.ID {
				return r.Params
			}
		}
		t.Fatal("the monthly rule is gone")
		return policy.Params{}
	}
	if got := calendarOf(); got.Calendar != policy.CalendarMonth || got.Window != 0 || got.Limit != 1000 {
		t.Fatalf("calendar round trip: %+v", got)
	}
	if rules, err := s.ListRules(ctx, acme.ID, pro.ID); err != nil || rules[len(rules)-1].Scope != policy.ScopeGlobal || rules[0].Scope != policy.ScopeRegion {
		t.Fatalf("scope round trip: %+v %v", rules, err)
	}
	// An adaptive concurrency rule's floor and adaptation round-trip.
	backend := rule("backend", 500)
	backend.Algorithm, backend.Burst, backend.Window, backend.LeaseTTL, backend.Floor, backend.Adaptation = policy.AdaptiveConcurrency, 0, time.Second, time.Minute, 4, policy.AdaptAIMD
	backend.PartitionBy, backend.Partitions = "tier", []policy.Partition{{Value: "gold", Share: 0.7}, {Value: "free", Share: 0.2}}
	if backend, _, err = s.CreateRule(ctx, op, acme.ID, pro.ID, backend); err != nil {
		t.Fatal(err)
	}
	if rules, err := s.ListRules(ctx, acme.ID, pro.ID); err != nil || !rules[len(rules)-1].SameAs(backend) {
		t.Fatalf("adaptive round trip: %+v %v, want %+v", rules[len(rules)-1].Params, err, backend.Params)
	}
	if _, err := s.DeleteRule(ctx, op, acme.ID, backend.ID); err != nil {
		t.Fatal(err)
	}
	monthly.Calendar, monthly.TimeZone = policy.CalendarDay, "Europe/Berlin" // a day from midnight in Berlin
	monthly.Message = "Täglich 1.000 Anfragen: https://example.com/preise"
	if _, err := s.UpdateRule(ctx, op, acme.ID, monthly, ""); err != nil {
		t.Fatal(err)
	}
	if got := calendarOf(); got.Calendar != policy.CalendarDay || got.TimeZone != "Europe/Berlin" {
		t.Fatalf("a time zone's round trip: %+v", got)
	}
	if rules, _ := s.ListRules(ctx, acme.ID, pro.ID); rules[len(rules)-1].Message != monthly.Message {
		t.Fatalf("a message's round trip: %+v", rules[len(rules)-1])
	}
	monthly.TimeZone = "Europe/Gotham"
	_, err = s.UpdateRule(ctx, op, acme.ID, monthly, "")
	wantCode(t, err, policy.CodeInvalid, "time_zone")
	monthly.Calendar, monthly.Window, monthly.TimeZone = policy.CalendarNone, time.Hour, ""
	if _, err := s.UpdateRule(ctx, op, acme.ID, monthly, ""); err != nil {
		t.Fatal(err)
	}
	if got := calendarOf(); got.Calendar != policy.CalendarNone || got.Window != time.Hour {
		t.Fatalf("calendar cleared: %+v", got)
	}
	if _, err := s.DeleteRule(ctx, op, acme.ID, monthly.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteRule(ctx, op, acme.ID, ids[2]); err != nil {
		t.Fatal(err)
	}
	// Positions close up: appending after a delete does not collide.
	if _, _, err := s.CreateRule(ctx, op, acme.ID, pro.ID, rule("d", 1)); err != nil {
		t.Fatal(err)
	}
	tiers, err := s.ListTiers(ctx, acme.ID)
	if err != nil || len(tiers) != 2 || tiers[1].Name != "pro" || len(tiers[1].Rules) != 3 || tiers[1].Rules[2].Name != "d" {
		t.Fatalf("tiers %+v %v", tiers, err)
	}
	_, err = s.DeleteTier(ctx, op, acme.ID, tiers[0].ID)
	wantCode(t, err, policy.CodeFailedPrecondition, "")
	if _, err := s.DeleteTier(ctx, op, acme.ID, pro.ID); err != nil {
		t.Fatal(err)
	}
	if rules, _ := s.ListRules(ctx, acme.ID, pro.ID); len(rules) != 0 {
		t.Fatalf("rules outlived their tier: %d", len(rules))
	}
}

func TestOverridesKeysAndSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme := newTenant(t, s, "acme")
	pro, _, _ := s.CreateTier(ctx, op, acme.ID, "pro")
	tiers, _ := s.ListTiers(ctx, acme.ID)
	r, _, err := s.CreateRule(ctx, op, acme.ID, tiers[0].ID, rule("per-client", 10))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "vip-*", Tier: "gold"})
	wantCode(t, err, policy.CodeInvalid, "tier")
	move, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "vip-*", Tier: pro.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "vip-*", Tier: pro.Name})
	wantCode(t, err, policy.CodeConflict, "identifier")
	p := policy.Params{Algorithm: policy.FixedWindow, Limit: 500, Calendar: policy.CalendarMonth} // 500 a month
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	if _, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "partner", RuleID: r.ID, Params: &p, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	// Blocks: of every request beside the tier move, and of one rule
	// beside its parameters; one of each per identifier.
	for _, o := range []policy.Override{{Identifier: "vip-*", Block: true}, {Identifier: "partner", RuleID: r.ID, Block: true}} {
		if _, _, err := s.CreateOverride(ctx, op, acme.ID, o); err != nil {
			t.Fatalf("block %+v: %v", o, err)
		}
		_, _, err = s.CreateOverride(ctx, op, acme.ID, o)
		wantCode(t, err, policy.CodeConflict, "identifier")
	}
	ovs, err := s.ListOverrides(ctx, acme.ID)
	if err != nil || len(ovs) != 4 || ovs[0].Identifier != "partner" || ovs[0].Params == nil || *ovs[0].Params != p || !ovs[0].ExpiresAt.Equal(exp) ||
		!ovs[1].Block || ovs[1].RuleID != r.ID || ovs[1].Params != nil || ovs[2].Tier != "pro" || ovs[2].Block || !ovs[3].Block || ovs[3].Tier != "" || ovs[3].RuleID != "" {
		t.Fatalf("overrides %+v %v", ovs, err)
	}

	secret, key, err := s.CreateKey(ctx, op, acme.ID, policy.KeyCheck, "edge")
	if err != nil || len(secret) < 40 || key.Prefix != secret[:len(key.Prefix)] {
		t.Fatalf("key %+v %v", key, err)
	}
	admin, _, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "console")
	viewer, vk, err := s.CreateKey(ctx, op, acme.ID, policy.KeyViewer, "analyst")
	if err != nil || vk.Kind != policy.KeyViewer || !strings.HasPrefix(viewer, "sk_viewer_") {
		t.Fatalf("viewer key %+v %v", vk, err)
	}
	// A check key shown to the control plane is found (to be refused
	// there) but not used: deciders report its uses.
	found, err := s.KeyByHash(ctx, policy.HashKey(secret))
	if err != nil || found.ID != key.ID || !found.LastUsedAt.IsZero() {
		t.Fatalf("lookup: %+v %v", found, err)
	}

	snap, checkKeys, err := s.Snapshot(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(checkKeys) != 1 || checkKeys[0] != (policy.CheckKey{Hash: policy.HashKey(secret)}) {
		t.Fatalf("snapshot keys: %d (the admin and viewer keys must not be there)", len(checkKeys))
	}
	_, v, _ := s.GetTenant(ctx, acme.ID)
	if snap.Version != v || len(snap.Tiers) != 2 || len(snap.Overrides) != 4 {
		t.Fatalf("snapshot v%d (tenant at v%d): %d tiers, %d overrides", snap.Version, v, len(snap.Tiers), len(snap.Overrides))
	}
	if _, err := decide.Compile(snap); err != nil {
		t.Fatalf("a stored snapshot does not compile: %v", err)
	}

	if _, err := s.RevokeKey(ctx, op, acme.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.KeyByHash(ctx, policy.HashKey(secret))
	wantCode(t, err, policy.CodeUnauthenticated, "")
	if _, err := s.KeyByHash(ctx, policy.HashKey(admin)); err != nil {
		t.Fatalf("the admin key: %v", err)
	}
	if k, err := s.KeyByHash(ctx, policy.HashKey(viewer)); err != nil || k.Kind != policy.KeyViewer || k.LastUsedAt.IsZero() {
		t.Fatalf("the viewer key, its use recorded: %+v %v", k, err)
	}
	if _, err := s.DeleteOverride(ctx, op, acme.ID, move.ID); err != nil {
		t.Fatal(err)
	}
	keys, _ := s.ListKeys(ctx, acme.ID)
	if len(keys) != 3 || keys[0].RevokedAt.IsZero() || !keys[1].RevokedAt.IsZero() || keys[2].Kind != policy.KeyViewer {
		t.Fatalf("keys %+v", keys)
	}
}

// Concurrent changes of one tenant get strictly increasing versions, one
// per change, and none is lost.
func TestConcurrentChangesKeepVersionsStrict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	acme := newTenant(t, s, "acme")
	tiers, _ := s.ListTiers(ctx, acme.ID)
	const workers, each = 10, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, _, err := s.CreateRule(ctx, op, acme.ID, tiers[0].ID, rule(fmt.Sprintf("r-%d-%d", w, i), 5)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var versions []int64
	rows, _ := pool.Query(ctx, `SELECT version FROM config_versions WHERE tenant_id = $1 ORDER BY version`, acme.ID)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(versions) != 1+workers*each {
		t.Fatalf("%d versions recorded, want %d (%v)", len(versions), 1+workers*each, err)
	}
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("versions not contiguous at %d: %v", i, versions[i:min(i+3, len(versions))])
		}
	}
	rules, _ := s.ListRules(ctx, acme.ID, tiers[0].ID)
	if len(rules) != workers*each {
		t.Fatalf("%d rules stored, want %d", len(rules), workers*each)
	}
}

// A change is notified at commit with its version; a rolled-back change
// never is.
func TestNotifyOnCommitOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, pool := newStore(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	acme := newTenant(t, s, "acme")
	boom := errors.New("boom")
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := s.bump(ctx, tx, op, change{tenantID: acme.ID, action: "update", resource: "tenant"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, _, err := s.CreateTier(ctx, op, acme.ID, "pro"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if n.Payload[:len(acme.ID)] == acme.ID { // other tests notify on the channel too
			got = append(got, n.Payload)
		}
	}
	if want := []string{acme.ID + ":1", acme.ID + ":2"}; !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v: the rolled-back version must not appear", got, want)
	}
}

func newPoolB(b *testing.B) *pgxpool.Pool { return pgtest.Pool(b) }

func tenantB(slug string) policy.Tenant { return policy.Tenant{Slug: slug, Name: slug} }

// RotateKey puts a new key of the same kind, name and expiry in place of
// a live one; the old one works through the grace, never past its own
// expiry, or is revoked at once. A check key's rotation reaches deciders
// (a config version, both keys in the snapshot meanwhile).
func TestRotateKey(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	acme := newTenant(t, s, "acme")
	trialEnd := time.Now().Add(48 * time.Hour).Truncate(time.Microsecond)
	oldSecret, oldKey, err := s.CreateExpiringKey(ctx, op, acme.ID, policy.KeyCheck, "edge", trialEnd)
	if err != nil {
		t.Fatal(err)
	}
	_, v0, _ := s.GetTenant(ctx, acme.ID)
	before := time.Now()
	secret, k, old, err := s.RotateKey(ctx, op, acme.ID, oldKey.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if k.ID == oldKey.ID || k.Kind != policy.KeyCheck || k.Name != "edge" || !k.ExpiresAt.Equal(trialEnd) || secret == oldSecret || !strings.HasPrefix(secret, "sk_check_") {
		t.Fatalf("the new key %+v", k)
	}
	if !old.RevokedAt.IsZero() || old.ExpiresAt.Before(before.Add(time.Hour)) || old.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("the old key through its grace: %+v", old)
	}
	snap, checkKeys, err := s.Snapshot(ctx, acme.ID)
	if err != nil || snap.Version <= v0 || len(checkKeys) != 2 {
		t.Fatalf("snapshot v%d (was %d), %d check keys: %v", snap.Version, v0, len(checkKeys), err)
	}
	// A grace past the old key's own expiry stops at it.
	_, k2, old2, err := s.RotateKey(ctx, op, acme.ID, k.ID, MaxKeyGrace)
	if err != nil || !old2.ExpiresAt.Equal(trialEnd) || !k2.ExpiresAt.Equal(trialEnd) {
		t.Fatalf("a grace past the expiry: old %+v, new %+v, %v", old2, k2, err)
	}
	// No grace: revoked at once. A revoked key is not rotated again.
	adminSecret, admin, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "console")
	newAdmin, _, old3, err := s.RotateKey(ctx, op, acme.ID, admin.ID, 0)
	if err != nil || old3.RevokedAt.IsZero() {
		t.Fatalf("rotated at once: %+v %v", old3, err)
	}
	_, err = s.KeyByHash(ctx, policy.HashKey(adminSecret))
	wantCode(t, err, policy.CodeUnauthenticated, "")
	if _, err := s.KeyByHash(ctx, policy.HashKey(newAdmin)); err != nil {
		t.Fatalf("the new admin key: %v", err)
	}
	_, _, _, err = s.RotateKey(ctx, op, acme.ID, admin.ID, 0)
	wantCode(t, err, policy.CodeFailedPrecondition, "")
	_, _, _, err = s.RotateKey(ctx, op, acme.ID, k2.ID, MaxKeyGrace+time.Second)
	wantCode(t, err, policy.CodeInvalid, "grace")
	_, _, _, err = s.RotateKey(ctx, op, acme.ID, "00000000-0000-0000-0000-000000000000", 0)
	wantCode(t, err, policy.CodeNotFound, "")
	// Each rotation is one audit entry of the old key.
	entries, err := s.ListAudit(ctx, acme.ID, 0, 10, admin.ID)
	if err != nil || len(entries) != 2 || entries[0].Action != "rotate" {
		t.Fatalf("the admin key's history: %+v %v", entries, err)
	}
}

// TouchCheckKeys records the use of live check keys only: not of admin
// keys, revoked keys, or hashes that are not 32 bytes.
func TestTouchCheckKeys(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	acme := newTenant(t, s, "acme")
	live, liveKey, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyCheck, "live")
	gone, goneKey, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyCheck, "gone")
	admin, _, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "admin")
	if _, err := s.RevokeKey(ctx, op, acme.ID, goneKey.ID); err != nil {
		t.Fatal(err)
	}
	hash := func(secret string) []byte { h := policy.HashKey(secret); return h[:] }
	if err := s.TouchCheckKeys(ctx, [][]byte{hash(live), hash(gone), hash(admin), []byte("short"), hash("unknown")}); err != nil {
		t.Fatal(err)
	}
	keys, err := s.ListKeys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if used := !k.LastUsedAt.IsZero(); used != (k.ID == liveKey.ID) {
			t.Errorf("key %s (%s): last used %v", k.Name, k.ID, k.LastUsedAt)
		}
	}
	if err := s.TouchCheckKeys(ctx, nil); err != nil {
		t.Fatalf("no keys: %v", err)
	}
	// A key recorded in the last 10 s is left as it is; an older use is
	// brought up to now.
	usedAt := func() time.Time {
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, liveKey.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	first := usedAt()
	if err := s.TouchCheckKeys(ctx, [][]byte{hash(live)}); err != nil || !usedAt().Equal(first) {
		t.Fatalf("touched again within 10 s: %v → %v (%v)", first, usedAt(), err)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now() - interval '1 minute' WHERE id = $1`, liveKey.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchCheckKeys(ctx, [][]byte{hash(live)}); err != nil || !usedAt().After(first.Add(-time.Second)) {
		t.Fatalf("a use a minute old not brought up to now: %v (%v)", usedAt(), err)
	}
}

// An admin call records its key's use, but writes the row at most once in
// 10 s: a console's calls a refresh would otherwise each make a row version.
func TestKeyByHashRecordsUseAtMostEvery10s(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	acme := newTenant(t, s, "acme")
	admin, key, _ := s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "console")
	row := func() (at time.Time, xmin string) {
		if err := pool.QueryRow(ctx, `SELECT last_used_at, xmin::text FROM api_keys WHERE id = $1`, key.ID).Scan(&at, &xmin); err != nil {
			t.Fatal(err)
		}
		return at, xmin
	}
	found, err := s.KeyByHash(ctx, policy.HashKey(admin))
	at, xmin := row()
	if err != nil || found.ID != key.ID || found.LastUsedAt.IsZero() || !found.LastUsedAt.Equal(at) {
		t.Fatalf("first use: %+v %v; stored %v", found, err, at)
	}
	again, err := s.KeyByHash(ctx, policy.HashKey(admin))
	if at2, xmin2 := row(); err != nil || !again.LastUsedAt.Equal(at) || at2 != at || xmin2 != xmin {
		t.Fatalf("second use within 10 s: returned %v, stored %v (xmin %s → %s), %v", again.LastUsedAt, at2, xmin, xmin2, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now() - interval '1 minute' WHERE id = $1`, key.ID); err != nil {
		t.Fatal(err)
	}
	old, _ := row()
	later, err := s.KeyByHash(ctx, policy.HashKey(admin))
	if at3, _ := row(); err != nil || !at3.After(old) || !later.LastUsedAt.Equal(at3) {
		t.Fatalf("a use a minute old: returned %v, stored %v (was %v), %v", later.LastUsedAt, at3, old, err)
	}
}

// Outages are told from faults: what a retry can cure is Unavailable, a
// bug or bad input is not, and neither is the caller's own deadline.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	refused := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
		return err
	}()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"connection failure", fmt.Errorf("query: %w", &pgconn.PgError{Code: "08006"}), true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"no rows", pgx.ErrNoRows, false},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"canceled", context.Canceled, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if got := translate(refused, "tier"); !errors.Is(got, policy.ErrUnavailable) {
		t.Errorf("translate of a refused connection: %v", got)
	}
}

// A tenant holds at most MaxTiers tiers and MaxLiveKeys unrevoked keys:
// one more is ResourceExhausted, and a revoked key frees its place.
func TestTenantLimits(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	acme := newTenant(t, s, "acme")
	fill := func(count, insert string, upTo int) {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, count, acme.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, insert, acme.ID, upTo-n); err != nil {
			t.Fatal(err)
		}
	}
	fill(`SELECT count(*) FROM tiers WHERE tenant_id = $1`,
		`INSERT INTO tiers (tenant_id, name) SELECT $1, 'filler-' || i FROM generate_series(1, $2) i`, policy.MaxTiers-1)
	if _, _, err := s.CreateTier(ctx, op, acme.ID, "last"); err != nil {
		t.Fatalf("the %dth tier: %v", policy.MaxTiers, err)
	}
	_, _, err := s.CreateTier(ctx, op, acme.ID, "over")
	wantCode(t, err, policy.CodeResourceExhausted, "")

	// Revoked keys (five of them here) take no place.
	fill(`SELECT count(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL`,
		`INSERT INTO api_keys (tenant_id, kind, prefix, hash, revoked_at)
			SELECT $1::uuid, 'check', 'sk_check_x', sha256(($1::text || '-' || i)::bytea), CASE WHEN i > $2::int THEN now() END
			FROM generate_series(1, $2::int + 5) i`, policy.MaxLiveKeys-1)
	_, last, err := s.CreateKey(ctx, op, acme.ID, policy.KeyCheck, "last")
	if err != nil {
		t.Fatalf("the %dth key: %v", policy.MaxLiveKeys, err)
	}
	_, _, err = s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "over")
	wantCode(t, err, policy.CodeResourceExhausted, "")
	if _, err := s.RevokeKey(ctx, op, acme.ID, last.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateKey(ctx, op, acme.ID, policy.KeyAdmin, "in its place"); err != nil {
		t.Fatalf("a key in a revoked one's place: %v", err)
	}
}

// PruneAudit deletes the audit rows written before a time, every
// tenant's, oldest first, in statements of pruneBatch rows, and keeps the
// rest.
func TestPruneAudit(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	acme, globex := newTenant(t, s, "acme"), newTenant(t, s, "globex")
	for i := range 3 {
		for _, tn := range []policy.Tenant{acme, globex} {
			if _, _, err := s.CreateTier(ctx, op, tn.ID, fmt.Sprint("tier-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() (n int64) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	total := count() // 2 tenants and 6 tiers
	// A backlog of old rows, more than one statement deletes.
	if _, err := pool.Exec(ctx, `INSERT INTO audit_log (tenant_id, actor, action, resource, at)
		SELECT $1, 'operator', 'update', 'tier', now() - interval '100 days' - g * interval '1 second' FROM generate_series(1, $2) g`,
		acme.ID, pruneBatch+10); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE audit_log SET at = now() - interval '40 days' WHERE resource = 'tenant'`); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneAudit(ctx, time.Now().Add(-90*24*time.Hour))
	if err != nil || n != pruneBatch+10 || count() != total {
		t.Fatalf("pruned %d (%v), %d rows left, want %d pruned and %d left", n, err, count(), pruneBatch+10, total)
	}
	if n, err := s.PruneAudit(ctx, time.Now().Add(-30*24*time.Hour)); err != nil || n != 2 || count() != total-2 {
		t.Fatalf("pruned %d (%v), %d left: want the two tenants' creations gone", n, err, count())
	}
	entries, err := s.ListAudit(ctx, acme.ID, 0, 100, "")
	if err != nil || len(entries) != 3 {
		t.Fatalf("acme's audit after pruning: %d entries, %v; want its 3 tiers", len(entries), err)
	}
}

// A key with an expiry works until it, then is refused by KeyByHash and
// left out of snapshots; an expiry already past is refused at creation.
func TestKeysExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	acme := newTenant(t, s, "acme")
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	adminSecret, admin, err := s.CreateExpiringKey(ctx, op, acme.ID, policy.KeyAdmin, "ci", later)
	if err != nil || !admin.ExpiresAt.Equal(later) {
		t.Fatalf("%+v, %v", admin, err)
	}
	checkSecret, check, err := s.CreateExpiringKey(ctx, op, acme.ID, policy.KeyCheck, "trial", later)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(ctx, policy.HashKey(adminSecret)); err != nil {
		t.Fatalf("a key before its expiry: %v", err)
	}
	_, keys, err := s.Snapshot(ctx, acme.ID)
	if err != nil || len(keys) != 1 || keys[0].Hash != policy.HashKey(checkSecret) || !keys[0].ExpiresAt.Equal(later) {
		t.Fatalf("snapshot keys %+v, %v", keys, err)
	}

	if _, err := pool.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])`,
		[]string{admin.ID, check.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(ctx, policy.HashKey(adminSecret)); policy.ErrorCode(err) != policy.CodeUnauthenticated {
		t.Fatalf("an expired key: %v, want Unauthenticated", err)
	}
	if _, keys, _ := s.Snapshot(ctx, acme.ID); len(keys) != 0 {
		t.Fatalf("an expired check key is in the snapshot: %+v", keys)
	}
	listed, _ := s.ListKeys(ctx, acme.ID)
	if len(listed) != 2 || listed[0].ExpiresAt.IsZero() {
		t.Fatalf("listed %+v", listed)
	}
	_, _, err = s.CreateExpiringKey(ctx, op, acme.ID, policy.KeyCheck, "late", time.Now().Add(-time.Minute))
	if pe, ok := err.(*policy.Error); !ok || pe.Code != policy.CodeInvalid || len(pe.Fields) != 1 || pe.Fields[0].Field != "expires_at" {
		t.Fatalf("an expiry in the past: %v", err)
	}
}

// TestConditionedUpdates: an update carrying the etag of a read applies
// while nothing else changed the row, and is refused (aborted, the row
// untouched) once another update came between; the etags of every read path
// (a list of rules, of tiers, of tenants, a get) are the ones updates check.
func TestConditionedUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme := newTenant(t, s, "acme")
	tier, _, err := s.CreateTier(ctx, op, acme.ID, "pro")
	if err != nil {
		t.Fatal(err)
	}
	created, _, err := s.CreateRule(ctx, op, acme.ID, tier.ID, rule("a", 10))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := s.ListRules(ctx, acme.ID, tier.ID)
	if err != nil || len(rules) != 1 {
		t.Fatalf("list: %v %v", rules, err)
	}
	tiers, err := s.ListTiers(ctx, acme.ID)
	i := slices.IndexFunc(tiers, func(x policy.Tier) bool { return x.ID == tier.ID })
	if err != nil || i < 0 || len(tiers[i].Rules) != 1 {
		t.Fatalf("tiers: %v %v", tiers, err)
	}
	read := rules[0].ETag()
	if created.ETag() != read || tiers[i].Rules[0].ETag() != read {
		t.Fatalf("etags of one state differ: created %s, listed %s, in its tier %s", created.ETag(), read, tiers[i].Rules[0].ETag())
	}

	first := rules[0]
	first.Limit = 20
	if _, err := s.UpdateRule(ctx, op, acme.ID, first, read); err != nil {
		t.Fatalf("update with the etag read: %v", err)
	}
	second := rules[0] // a second editor, who read before the first wrote
	second.Name = "renamed"
	_, err = s.UpdateRule(ctx, op, acme.ID, second, read)
	wantCode(t, err, policy.CodeAborted, "")
	rules, _ = s.ListRules(ctx, acme.ID, tier.ID)
	if rules[0].Limit != 20 || rules[0].Name != "a" {
		t.Fatalf("an aborted update wrote: %+v", rules[0])
	}
	if _, err := s.UpdateRule(ctx, op, acme.ID, second, "anything"); err == nil {
		t.Fatal("an etag that names no state of the rule was accepted")
	}
	second.Limit = rules[0].Limit // read again, reapplied
	if _, err := s.UpdateRule(ctx, op, acme.ID, second, rules[0].ETag()); err != nil {
		t.Fatalf("update after reading again: %v", err)
	}

	got, _, err := s.GetTenant(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := s.ListTenants(ctx)
	// The rules' changes bumped the tenant's config version, not its etag.
	if list[0].ETag() != got.ETag() || got.ETag() != acme.ETag() {
		t.Fatalf("tenant etags differ: created %s, got %s, listed %s", acme.ETag(), got.ETag(), list[0].ETag())
	}
	renamed := got
	renamed.Name = "Acme Corp"
	if _, err := s.UpdateTenant(ctx, op, renamed, got.ETag()); err != nil {
		t.Fatalf("tenant update with its etag: %v", err)
	}
	shadowed := got
	shadowed.Shadow = true
	_, err = s.UpdateTenant(ctx, op, shadowed, got.ETag())
	wantCode(t, err, policy.CodeAborted, "")
	if now, _, _ := s.GetTenant(ctx, acme.ID); now.Shadow || now.Name != "Acme Corp" {
		t.Fatalf("tenant after an aborted update: %+v", now)
	}
}

// TestPageOverrides pages through a tenant's overrides: every one once, in
// the byte order of identifiers whatever the database's collation, and a
// prefix taken literally (LIKE's % and _ included).
func TestPageOverrides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme, other := newTenant(t, s, "acme"), newTenant(t, s, "other")
	idents := []string{"b", "a_c", "abc", "a%b", "ab", "Z", "é", "a", `a\b`, "ab-2", "abd"}
	for _, id := range idents {
		if _, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: id, Block: true}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if _, _, err := s.CreateOverride(ctx, op, other.ID, policy.Override{Identifier: "ab-other", Block: true}); err != nil {
		t.Fatal(err)
	}
	all := func(prefix string, size int) (got []string, pages int) {
		t.Helper()
		var after *policy.OverrideCursor
		for {
			page, next, err := s.PageOverrides(ctx, acme.ID, prefix, after, size)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > size || (next != nil && len(page) != size) {
				t.Fatalf("a page of %d (size %d), next %v", len(page), size, next)
			}
			for _, o := range page {
				got = append(got, o.Identifier)
			}
			if next == nil {
				return got, pages
			}
			after = next
		}
	}
	want := slices.Clone(idents)
	slices.Sort(want) // Go compares strings byte by byte
	for _, size := range []int{1, 2, 3, 1000} {
		if got, pages := all("", size); !slices.Equal(got, want) || pages != (len(want)+size-1)/size {
			t.Fatalf("size %d: %q in %d pages, want %q", size, got, pages, want)
		}
	}
	for prefix, want := range map[string][]string{
		"ab": {"ab", "ab-2", "abc", "abd"}, "a%": {"a%b"}, "a_": {"a_c"}, `a\`: {`a\b`}, "é": {"é"}, "x": nil,
	} {
		if got, _ := all(prefix, 2); !slices.Equal(got, want) {
			t.Errorf("prefix %q: %q, want %q", prefix, got, want)
		}
	}
	_, _, err := s.PageOverrides(ctx, acme.ID, "", &policy.OverrideCursor{Identifier: "a", ID: "not-an-id"}, 10)
	wantCode(t, err, policy.CodeInvalid, "page_token")
}

func mapSlugs(ts []policy.VersionedTenant) (slugs []string) {
	for _, t := range ts {
		slugs = append(slugs, t.Slug)
	}
	return slugs
}

// TestPageTenants pages through the tenants by slug in byte order (where
// an en_US collation would ignore the hyphens) and finds them by a slug
// prefix; the slug a page ends at is where the next begins.
func TestPageTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	slugs := []string{"ab", "a-c", "b", "a", "a1", "abc", "ab-2", "z9", "0x"}
	for _, slug := range slugs {
		newTenant(t, s, slug)
	}
	want := slices.Clone(slugs)
	slices.Sort(want)
	all := func(prefix string, size int) (got []string, pages int) {
		t.Helper()
		after := ""
		for {
			page, next, err := s.PageTenants(ctx, prefix, after, size)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > size || (next != "" && (len(page) != size || next != page[size-1].Slug)) {
				t.Fatalf("a page of %d (size %d), next %q", len(page), size, next)
			}
			for _, tn := range page {
				got = append(got, tn.Slug)
			}
			if next == "" {
				return got, pages
			}
			after = next
		}
	}
	for _, size := range []int{1, 2, 4, 1000} {
		if got, pages := all("", size); !slices.Equal(got, want) || pages != (len(want)+size-1)/size {
			t.Fatalf("size %d: %q in %d pages, want %q", size, got, pages, want)
		}
	}
	if list, _ := s.ListTenants(ctx); len(list) != len(want) || list[1].Slug != want[1] {
		t.Fatalf("ListTenants: %v", list)
	}
	// allPages (ListTenants' and ListKeys' loop) gathers pages of 2.
	twos, err := allPages(func(after string) ([]policy.VersionedTenant, string, error) { return s.PageTenants(ctx, "", after, 2) })
	if got := mapSlugs(twos); err != nil || !slices.Equal(got, want) {
		t.Fatalf("every page of 2: %q, %v", got, err)
	}
	for prefix, want := range map[string][]string{"ab": {"ab", "ab-2", "abc"}, "a-": {"a-c"}, "z9": {"z9"}, "_": nil, "%": nil} {
		if got, _ := all(prefix, 2); !slices.Equal(got, want) {
			t.Errorf("prefix %q: %q, want %q", prefix, got, want)
		}
	}
}

// TestPageKeys pages through a tenant's keys oldest first, the revoked
// ones only when asked, each once.
func TestPageKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme, other := newTenant(t, s, "acme"), newTenant(t, s, "other")
	var all, live []string
	for i := range 7 {
		_, k, err := s.CreateKey(ctx, op, acme.ID, policy.KeyCheck, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, k.Name)
		if i == 1 || i == 4 {
			if _, err := s.RevokeKey(ctx, op, acme.ID, k.ID); err != nil {
				t.Fatal(err)
			}
			continue
		}
		live = append(live, k.Name)
	}
	if _, _, err := s.CreateKey(ctx, op, other.ID, policy.KeyCheck, "theirs"); err != nil {
		t.Fatal(err)
	}
	pages := func(revoked bool, size int) (got []string, pages int) {
		t.Helper()
		var after *policy.KeyCursor
		for {
			page, next, err := s.PageKeys(ctx, acme.ID, revoked, after, size)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > size || (next != nil && len(page) != size) {
				t.Fatalf("a page of %d (size %d), next %v", len(page), size, next)
			}
			for _, k := range page {
				got = append(got, k.Name)
			}
			if next == nil {
				return got, pages
			}
			after = next
		}
	}
	for _, size := range []int{1, 2, 3, 1000} {
		if got, n := pages(false, size); !slices.Equal(got, live) || n != (len(live)+size-1)/size {
			t.Fatalf("size %d, not revoked: %q in %d pages, want %q", size, got, n, live)
		}
		if got, _ := pages(true, size); !slices.Equal(got, all) {
			t.Fatalf("size %d, revoked too: %q, want %q", size, got, all)
		}
	}
	_, _, err := s.PageKeys(ctx, acme.ID, true, &policy.KeyCursor{CreatedAt: time.Now(), ID: "not-an-id"}, 10)
	wantCode(t, err, policy.CodeInvalid, "page_token")
}

// TestUpdateOverride: an override changes in place, in one config version
// (no moment without it), conditioned on its etag like a rule; the etag of
// a created override, its expiry given to the nanosecond, is the one reads
// give.
func TestUpdateOverride(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme, other := newTenant(t, s, "acme"), newTenant(t, s, "other")
	pro, _, err := s.CreateTier(ctx, op, acme.ID, "pro")
	if err != nil {
		t.Fatal(err)
	}
	created, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "bigcorp", Tier: pro.Name, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "smallco", Tier: pro.Name}); err != nil {
		t.Fatal(err)
	}
	list, _ := s.ListOverrides(ctx, acme.ID)
	if list[0].ID != created.ID || list[0].ETag() != created.ETag() {
		t.Fatalf("created %+v (etag %s), listed %+v (etag %s)", created, created.ETag(), list[0], list[0].ETag())
	}
	_, before, _ := s.GetTenant(ctx, acme.ID)
	blocked := created
	blocked.Tier, blocked.Block, blocked.ExpiresAt = "", true, time.Time{}
	v, err := s.UpdateOverride(ctx, op, acme.ID, blocked, created.ETag())
	if err != nil || v != before+1 {
		t.Fatalf("update: v%d (was %d), %v", v, before, err)
	}
	list, _ = s.ListOverrides(ctx, acme.ID)
	if len(list) != 2 || list[0].ID != created.ID || !list[0].Block || list[0].Tier != "" || !list[0].ExpiresAt.IsZero() {
		t.Fatalf("after the update: %+v", list)
	}
	_, err = s.UpdateOverride(ctx, op, acme.ID, created, created.ETag())
	wantCode(t, err, policy.CodeAborted, "")
	renamed := list[0]
	renamed.Identifier = "smallco" // the other's: one block, one tier move may stand beside each other
	renamed.Block, renamed.Tier = false, pro.Name
	_, err = s.UpdateOverride(ctx, op, acme.ID, renamed, "")
	wantCode(t, err, policy.CodeConflict, "identifier")
	renamed.Tier = "gold"
	_, err = s.UpdateOverride(ctx, op, acme.ID, renamed, "")
	wantCode(t, err, policy.CodeInvalid, "tier")
	_, err = s.UpdateOverride(ctx, op, other.ID, list[0], "")
	wantCode(t, err, policy.CodeNotFound, "")
	if audit, _ := s.ListAudit(ctx, acme.ID, 0, 1, ""); len(audit) != 1 || audit[0].Action != "update" || audit[0].Resource != "override" {
		t.Fatalf("audit: %+v", audit)
	}
}

// Partial parameters (no algorithm) are completed from the rule's when an
// override is created, from the override's own when it is updated for the
// same rule, and validated once complete.
func TestOverrideInheritsParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme := newTenant(t, s, "acme")
	tiers, _ := s.ListTiers(ctx, acme.ID)
	r, _, err := s.CreateRule(ctx, op, acme.ID, tiers[0].ID, rule("per-client", 10)) // 10 a minute, 3 at once
	if err != nil {
		t.Fatal(err)
	}
	monthly := rule("monthly", 1000)
	monthly.Params = policy.Params{Algorithm: policy.FixedWindow, Limit: 1000, Calendar: policy.CalendarMonth}
	m, _, err := s.CreateRule(ctx, op, acme.ID, tiers[0].ID, monthly)
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "partner", RuleID: r.ID, Params: &policy.Params{Limit: 100}})
	want := policy.Params{Algorithm: policy.TokenBucket, Limit: 100, Window: time.Minute, Burst: 30}
	if err != nil || o.Params == nil || *o.Params != want {
		t.Fatalf("created %+v, want params %+v: %v", o.Params, want, err)
	}
	// An update of the same rule's parameters starts from the override's.
	o.Params = &policy.Params{Window: time.Hour}
	if _, err := s.UpdateOverride(ctx, op, acme.ID, o, ""); err != nil {
		t.Fatal(err)
	}
	ovs, _ := s.ListOverrides(ctx, acme.ID)
	if want.Window = time.Hour; len(ovs) != 1 || *ovs[0].Params != want {
		t.Fatalf("updated %+v, want %+v", ovs[0].Params, want)
	}
	// Moved to another rule, it starts from that rule's.
	o = ovs[0]
	o.RuleID, o.Params = m.ID, &policy.Params{Limit: 5000}
	if _, err := s.UpdateOverride(ctx, op, acme.ID, o, ""); err != nil {
		t.Fatal(err)
	}
	ovs, _ = s.ListOverrides(ctx, acme.ID)
	if want := (policy.Params{Algorithm: policy.FixedWindow, Limit: 5000, Calendar: policy.CalendarMonth}); *ovs[0].Params != want {
		t.Fatalf("moved to the monthly rule: %+v, want %+v", ovs[0].Params, want)
	}
	// A time zone alone keeps the rule's calendar; a window drops both.
	o.Params = &policy.Params{TimeZone: "Asia/Tokyo"}
	if _, err := s.UpdateOverride(ctx, op, acme.ID, o, ""); err != nil {
		t.Fatal(err)
	}
	ovs, _ = s.ListOverrides(ctx, acme.ID)
	if want := (policy.Params{Algorithm: policy.FixedWindow, Limit: 5000, Calendar: policy.CalendarMonth, TimeZone: "Asia/Tokyo"}); *ovs[0].Params != want {
		t.Fatalf("a zone given: %+v, want %+v", ovs[0].Params, want)
	}
	o = ovs[0]
	o.Params = &policy.Params{Window: time.Hour}
	if _, err := s.UpdateOverride(ctx, op, acme.ID, o, ""); err != nil {
		t.Fatal(err)
	}
	ovs, _ = s.ListOverrides(ctx, acme.ID)
	if want := (policy.Params{Algorithm: policy.FixedWindow, Limit: 5000, Window: time.Hour}); *ovs[0].Params != want {
		t.Fatalf("a window given: %+v, want %+v", ovs[0].Params, want)
	}
	// What it inherits is validated with what it gives: a token bucket
	// has no calendar; parameters without a rule have nothing to inherit.
	_, _, err = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "odd", RuleID: r.ID, Params: &policy.Params{Calendar: policy.CalendarWeek}})
	wantCode(t, err, policy.CodeInvalid, "params.calendar")
	_, _, err = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "odd", Tier: tiers[0].Name, Params: &policy.Params{Limit: 5}})
	wantCode(t, err, policy.CodeInvalid, "")
	_, _, err = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: "odd", RuleID: "0190b1a2-0000-7000-8000-000000000000", Params: &policy.Params{Limit: 5}})
	wantCode(t, err, policy.CodeInvalid, "rule_id")
}

// Renaming a tier renames it everywhere in one version: the overrides
// that move clients to it and the tenant's default. A tier that overrides
// move clients to cannot be deleted, even by a delete racing the override.
func TestRenameAndDeleteTierInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	acme := newTenant(t, s, "acme")
	tiers, _ := s.ListTiers(ctx, acme.ID)
	def := tiers[0]
	pro, _, err := s.CreateTier(ctx, op, acme.ID, "pro")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bigco", "acme-labs", "zeta", "omega"} {
		if _, _, err := s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: id, Tier: "pro"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.DeleteTier(ctx, op, acme.ID, pro.ID)
	wantCode(t, err, policy.CodeFailedPrecondition, "")
	if !strings.Contains(err.Error(), "4 override(s) (acme-labs, bigco, omega, …)") {
		t.Fatalf("the refusal names the overrides: %v", err)
	}

	_, before, _ := s.GetTenant(ctx, acme.ID)
	v, err := s.RenameTier(ctx, op, acme.ID, pro.ID, "gold")
	if err != nil || v != before+1 {
		t.Fatalf("rename: v%d (was %d): %v", v, before, err)
	}
	if _, err := s.RenameTier(ctx, op, acme.ID, def.ID, "business"); err != nil {
		t.Fatal(err)
	}
	ten, _, _ := s.GetTenant(ctx, acme.ID)
	ovs, _ := s.ListOverrides(ctx, acme.ID)
	tiers, _ = s.ListTiers(ctx, acme.ID)
	if ten.DefaultTier != "business" || len(ovs) != 4 || ovs[0].Tier != "gold" || ovs[3].Tier != "gold" || tiers[0].Name != "business" || tiers[1].Name != "gold" {
		t.Fatalf("after the renames: default %q, overrides %+v, tiers %+v", ten.DefaultTier, ovs, tiers)
	}
	_, err = s.RenameTier(ctx, op, acme.ID, pro.ID, "business")
	wantCode(t, err, policy.CodeConflict, "")
	_, err = s.RenameTier(ctx, op, acme.ID, pro.ID, "Not A Slug")
	wantCode(t, err, policy.CodeInvalid, "name")
	if audit, _ := s.ListAudit(ctx, acme.ID, 0, 1, pro.ID); len(audit) != 1 || audit[0].Action != "update" || audit[0].Resource != "tier" {
		t.Fatalf("the rename's audit: %+v", audit)
	}

	// A delete racing an override to the same tier: one of them loses,
	// and no override is left naming a tier that is gone.
	for i := range 20 {
		tier, _, err := s.CreateTier(ctx, op, acme.ID, fmt.Sprintf("race-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		var created, deleted error
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _, created = s.CreateOverride(ctx, op, acme.ID, policy.Override{Identifier: fmt.Sprintf("racer-%d", i), Tier: tier.Name})
		})
		wg.Go(func() { _, deleted = s.DeleteTier(ctx, op, acme.ID, tier.ID) })
		wg.Wait()
		if (created == nil) == (deleted == nil) {
			t.Fatalf("round %d: override %v, delete %v: exactly one must win", i, created, deleted)
		}
		// The same with the tier made the tenant's default.
		tier, _, err = s.CreateTier(ctx, op, acme.ID, fmt.Sprintf("default-race-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		var updated error
		wg.Go(func() {
			ten, _, err := s.GetTenant(ctx, acme.ID)
			if err != nil {
				updated = err
				return
			}
			ten.DefaultTier = tier.Name
			_, updated = s.UpdateTenant(ctx, op, ten, "")
		})
		wg.Go(func() { _, deleted = s.DeleteTier(ctx, op, acme.ID, tier.ID) })
		wg.Wait()
		if (updated == nil) == (deleted == nil) {
			t.Fatalf("round %d: default tier %v, delete %v: exactly one must win", i, updated, deleted)
		}
	}
}

// Expired overrides: refused at creation, left out of snapshots (not of
// lists), and deleted by PruneOverrides once expired before its bound,
// each tenant's in one config version with an audit row each by
// policy.ActorRetention; the others stay.
func TestExpiredOverridesArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	now := time.Now()
	_, _, err := s.CreateOverride(ctx, op, newTenant(t, s, "late").ID, policy.Override{Identifier: "x", Tier: "default", ExpiresAt: now.Add(-time.Second)})
	wantCode(t, err, policy.CodeInvalid, "expires_at")

	acme, shop := newTenant(t, s, "acme"), newTenant(t, s, "shop")
	create := func(tenant policy.Tenant, id string, expires time.Time) policy.Override {
		t.Helper()
		o, _, err := s.CreateOverride(ctx, op, tenant.ID, policy.Override{Identifier: id, Block: true, ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	soon := create(acme, "soon", now.Add(time.Hour))
	create(acme, "later", now.Add(3*time.Hour))
	create(acme, "never", time.Time{})
	create(shop, "a", now.Add(time.Hour))
	create(shop, "b", now.Add(90*time.Minute))
	_, acmeBefore, _ := s.GetTenant(ctx, acme.ID)
	_, shopBefore, _ := s.GetTenant(ctx, shop.ID)

	// An override that has expired applies to nothing: the snapshot
	// leaves it out, the list shows it.
	soon.ExpiresAt = now.Add(-time.Minute)
	if _, err := s.UpdateOverride(ctx, op, acme.ID, soon, ""); err != nil {
		t.Fatal(err)
	}
	acmeBefore++
	snap, _, err := s.Snapshot(ctx, acme.ID)
	if err != nil || len(snap.Overrides) != 2 || slices.ContainsFunc(snap.Overrides, func(o policy.Override) bool { return o.ID == soon.ID }) {
		t.Fatalf("snapshot: %+v %v", snap.Overrides, err)
	}
	if all, _ := s.ListOverrides(ctx, acme.ID); len(all) != 3 {
		t.Fatalf("list: %d overrides, want the expired one too", len(all))
	}

	// Pruning what expires within two hours: acme's soon, shop's both.
	n, err := s.PruneOverrides(ctx, now.Add(2*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v; want 3", n, err)
	}
	left, _ := s.ListOverrides(ctx, acme.ID)
	if len(left) != 2 || left[0].Identifier != "later" || left[1].Identifier != "never" {
		t.Fatalf("acme kept %+v", left)
	}
	if left, _ := s.ListOverrides(ctx, shop.ID); len(left) != 0 {
		t.Fatalf("shop kept %+v", left)
	}
	for _, tc := range []struct {
		tenant  policy.Tenant
		before  int64
		deleted int
	}{{acme, acmeBefore, 1}, {shop, shopBefore, 2}} {
		_, v, _ := s.GetTenant(ctx, tc.tenant.ID)
		if v != tc.before+1 {
			t.Errorf("%s: version %d after pruning, want %d (one version)", tc.tenant.Slug, v, tc.before+1)
		}
		audit, err := s.ListAudit(ctx, tc.tenant.ID, 0, 10, "")
		if err != nil || len(audit) < tc.deleted {
			t.Fatalf("%s audit: %v", tc.tenant.Slug, err)
		}
		for _, a := range audit[:tc.deleted] {
			if a.Actor != string(policy.ActorRetention) || a.Action != "delete" || a.Resource != "override" || a.Version != v || len(a.Old) == 0 {
				t.Errorf("%s audit row %+v", tc.tenant.Slug, a)
			}
		}
	}
	if n, err := s.PruneOverrides(ctx, now.Add(2*time.Hour)); err != nil || n != 0 {
		t.Fatalf("pruning again: %d, %v", n, err)
	}
}
