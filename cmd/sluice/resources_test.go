package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// TestCLIAgainstDev drives the resource commands and check against a
// running `sluice dev`, in text and JSON.
func TestCLIAgainstDev(t *testing.T) {
	banner, stop := startDev(t, devEnv(t))
	defer func() { _ = stop() }()
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner)[1]
	env := map[string]string{"SLUICE_SERVER": api, "SLUICE_DECIDER": api,
		"SLUICE_KEY": regexp.MustCompile(`admin key\s+(\S+)`).FindStringSubmatch(banner)[1]}
	sluice := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
		return out.String() + errOut.String(), err
	}

	out, err := sluice("tiers", "list")
	if err != nil || !strings.Contains(out, "free") || !strings.Contains(out, "pro") {
		t.Fatalf("tiers list: %v\n%s", err, out)
	}
	var tiers struct{ Tiers []struct{ ID, Name string } }
	out, err = sluice("tiers", "list", "-json")
	if err != nil || json.Unmarshal([]byte(out), &tiers) != nil || len(tiers.Tiers) != 2 {
		t.Fatalf("tiers list -json: %v\n%s", err, out)
	}
	pro := tiers.Tiers[0].ID
	if tiers.Tiers[0].Name != "pro" {
		pro = tiers.Tiers[1].ID
	}
	// A tier renamed and deleted by name; the default tier cannot be.
	if out, err = sluice("tiers", "create", "temp"); err != nil {
		t.Fatalf("tiers create: %v\n%s", err, out)
	}
	if out, err = sluice("tiers", "rename", "-name", "scratch", "temp"); err != nil || !strings.Contains(out, "renamed tier temp to scratch") {
		t.Fatalf("tiers rename: %v\n%s", err, out)
	}
	if out, err = sluice("tiers", "delete", "scratch"); err != nil || !strings.Contains(out, "deleted tier scratch") {
		t.Fatalf("tiers delete by name: %v\n%s", err, out)
	}
	// -name as rules and tenants take it; a tier needs a name, and one only.
	if out, err = sluice("tiers", "create", "-name", "flagged"); err != nil || !strings.Contains(out, "created tier flagged") {
		t.Fatalf("tiers create -name: %v\n%s", err, out)
	}
	if out, err = sluice("tiers", "create"); !errors.Is(err, errUsage) || !strings.Contains(out, "the tier's name") {
		t.Fatalf("tiers create without a name: %v\n%s", err, out)
	}
	if out, err = sluice("tiers", "create", "-name", "a", "b"); !errors.Is(err, errUsage) || !strings.Contains(out, "two names") {
		t.Fatalf("tiers create with two names: %v\n%s", err, out)
	}
	if out, err = sluice("tiers", "delete", "flagged"); err != nil {
		t.Fatalf("tiers delete: %v\n%s", err, out)
	}
	if _, err = sluice("tiers", "delete", "free"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("deleting the default tier: %v", err)
	}

	// Invalid input: a clear, field-level error and the invalid-input exit path.
	_, err = sluice("rules", "create", "-tier", pro, "-name", "bad", "-limit", "0", "-window", "1m")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(describe(err), "\n  limit: must be between") {
		t.Fatalf("invalid rule: %v (%s)", err, describe(err))
	}
	out, err = sluice("rules", "create", "-tier", pro, "-name", "burst", "-algorithm", "fixed_window", "-limit", "2", "-window", "1h", "-match", "route=/cli,client_id=*", "-sync", "50ms", "-exact")
	if err != nil || !strings.Contains(out, "created rule burst") {
		t.Fatalf("rules create: %v\n%s", err, out)
	}
	if out, err = sluice("rules", "create", "-tier", pro, "-name", "blocklist", "-limit", "1", "-window", "1s", "-match", "client_id=blocked-*", "-block", "-replaces", "burst"); err != nil {
		t.Fatalf("rules create -block: %v\n%s", err, out)
	}
	if out, err = sluice("rules", "list", "-tier", pro); err != nil || !strings.Contains(out, "fixed_window") || !strings.Contains(out, "route=/cli") ||
		!strings.Contains(out, "sync 50ms") || !strings.Contains(out, "exact") || !strings.Contains(out, "block") ||
		!strings.Contains(out, "replaces burst") {
		t.Fatalf("rules list: %v\n%s", err, out)
	}
	// Without -tier: every tier's rules (the free tier's login, pro's
	// burst), each with its tier's name.
	if out, err = sluice("rules", "list"); err != nil || !regexp.MustCompile(`(?m)\sfree\s+login\s`).MatchString(out) || !regexp.MustCompile(`(?m)\spro\s+burst\s`).MatchString(out) {
		t.Fatalf("rules list of every tier: %v\n%s", err, out)
	}
	// A tier by name; the parameters of other algorithms; a failure mode.
	out, err = sluice("rules", "create", "-tier", "pro", "-name", "ramp", "-limit", "50", "-window", "1s", "-warm-up", "30s", "-cold-factor", "4", "-failure-mode", "closed", "-enabled=false")
	if err != nil || !strings.Contains(out, "created rule ramp") {
		t.Fatalf("rules create -tier NAME: %v\n%s", err, out)
	}
	var listed struct{ Rules []listedRule }
	ruleNamed := func(name string) (r listedRule) {
		t.Helper()
		listed.Rules = nil
		out, err := sluice("rules", "list", "-tier", "pro", "-json")
		if err != nil || json.Unmarshal([]byte(out), &listed) != nil {
			t.Fatalf("rules list -json: %v\n%s", err, out)
		}
		for _, r := range listed.Rules {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no rule %s in %s", name, out)
		return r
	}
	ramp := ruleNamed("ramp")
	if ramp.FailureMode != "FAILURE_MODE_CLOSED" || ramp.Enabled || ramp.Params.WarmUp != "30s" || ramp.Params.ColdFactor != 4 || ramp.Params.Limit != "50" {
		t.Fatalf("created %+v", ramp)
	}
	// An update changes what its flags say and nothing else.
	if out, err = sluice("rules", "update", "-enabled", "-shadow", "-limit", "60", ramp.ID); err != nil || !strings.Contains(out, "updated rule ramp") {
		t.Fatalf("rules update: %v\n%s", err, out)
	}
	// Again, by TIER/RULE: nothing changes, and no config version is made.
	version := regexp.MustCompile(`config version (\d+)`).FindStringSubmatch(out)
	if again, err := sluice("rules", "update", "-limit", "60", "pro/ramp"); err != nil || version == nil ||
		!strings.Contains(again, "unchanged rule ramp") || !strings.HasSuffix(strings.TrimSpace(again), "config version "+version[1]) {
		t.Fatalf("the same update again: %v\n%s (after %s)", err, again, out)
	}
	if got := ruleNamed("ramp"); !got.Enabled || !got.Shadow || got.Params.Limit != "60" || got.FailureMode != "FAILURE_MODE_CLOSED" ||
		got.Params.WarmUp != "30s" || got.Params.ColdFactor != 4 || got.Params.Algorithm != "ALGORITHM_TOKEN_BUCKET" {
		t.Fatalf("updated %+v", got)
	}
	// Flags may follow the id, as in kubectl and gh.
	if _, err = sluice("rules", "update", ramp.ID, "-limit", "0"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("an invalid update, its flag after the id: %v", err)
	}
	if _, err = sluice("rules", "update", "-limit", "5", "no-such-rule"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("an update of no rule: %v", err)
	}
	if out, err = sluice("rules", "delete", ramp.ID); err != nil {
		t.Fatalf("rules delete: %v\n%s", err, out)
	}
	// The audit log has the rule's three changes, newest first.
	out, err = sluice("audit", "list", "-limit", "3")
	if err != nil || len(regexp.MustCompile(`(?m)^\d+\s.*`+ramp.ID).FindAllString(out, -1)) != 3 || strings.Index(out, "delete") > strings.Index(out, "create") {
		t.Fatalf("audit list: %v\n%s", err, out)
	}
	// Its history alone, with what each change did: the update turned it
	// on and into a shadow, and its limit from 50 to 60.
	out, err = sluice("audit", "list", "-resource", ramp.ID)
	if err != nil || len(regexp.MustCompile(`(?m)^\d+\s`).FindAllString(out, -1)) != 3 ||
		!regexp.MustCompile(`update\s.*enabled=true, limit 50→60, shadow=true`).MatchString(out) || !regexp.MustCompile(`create\s.*cold_factor=4`).MatchString(out) {
		t.Fatalf("audit list -resource: %v\n%s", err, out)
	}
	// A monthly quota: a calendar window, shown as one.
	if out, err = sluice("rules", "create", "-tier", "pro", "-name", "quota", "-algorithm", "fixed_window", "-limit", "1000", "-calendar", "month"); err != nil {
		t.Fatalf("rules create -calendar month: %v\n%s", err, out)
	}
	if out, err = sluice("rules", "list", "-tier", "pro"); err != nil || !regexp.MustCompile(`(?m)\squota\s+fixed_window\s+1000\s+month\s`).MatchString(out) {
		t.Fatalf("rules list of a calendar window: %v\n%s", err, out)
	}
	quota := ruleNamed("quota")
	if _, err = sluice("rules", "update", "-window", "1h", quota.ID); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a window beside a calendar one: %v", err)
	}
	if _, err = sluice("rules", "update", "-time-zone", "Mars/Olympus_Mons", quota.ID); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("an unknown time zone: %v", err)
	}
	// A daily quota from midnight in New York, then a window again: the
	// zone goes with the calendar.
	if out, err = sluice("rules", "update", "-calendar", "day", "-time-zone", "America/New_York", "-message", "1,000 a day, from midnight in New York", quota.ID); err != nil {
		t.Fatalf("rules update -calendar day -time-zone: %v\n%s", err, out)
	}
	if out, err = sluice("rules", "list", "-tier", "pro"); err != nil || !regexp.MustCompile(`(?m)\squota\s+fixed_window\s+1000\s+day America/New_York\s`).MatchString(out) {
		t.Fatalf("rules list of a daily window in a zone: %v\n%s", err, out)
	}
	if out, err = sluice("rules", "update", "-calendar", "none", "-window", "1h", quota.ID); err != nil {
		t.Fatalf("rules update -calendar none: %v\n%s", err, out)
	}
	if got := ruleNamed("quota"); got.Params.TimeZone != "" || got.Params.Calendar != "" || got.Params.Window != "3600s" || got.Message != "1,000 a day, from midnight in New York" {
		t.Fatalf("after -calendar none: %+v", got)
	}
	if out, err = sluice("rules", "delete", quota.ID); err != nil {
		t.Fatalf("rules delete: %v\n%s", err, out)
	}
	// Each command takes its own flags only, and says which with -h.
	for _, args := range [][]string{{"keys", "create", "-limit", "5"}, {"rules", "create", "-tier", "pro", "-kind", "admin"},
		{"rules", "create", "-tier", "pro", "-name", "x", "-limit", "1", "-window", "1s", "-failure-mode", "sideways"},
		{"rules", "create", "-tier", "pro", "-name", "x", "-limit", "1", "-window", "1s", "-failure-mode", "sideways", "-match", "route=/x"}, // a later, valid flag does not hide it
		{"rules", "create", "-tier", "pro", "-name", "x", "-limit", "1", "-window", "1s", "-algorithm", "magic"},
		{"rules", "delete"}, {"tiers", "list", "extra"}} {
		if out, err := sluice(args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error\n%s", args, err, out)
		}
	}
	if _, err = sluice("rules", "create", "-tier", "no-such-tier", "-name", "x", "-limit", "1", "-window", "1s"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a rule in no tier: %v", err)
	}
	if out, err = sluice("rules", "update", "-h"); err != nil || !strings.Contains(out, "-failure-mode") || strings.Contains(out, "-kind") || !strings.Contains(out, "keeps the rest") {
		t.Errorf("rules update -h: %v\n%s", err, out)
	}

	var key struct {
		Secret string
		Key    struct{ ID string }
	}
	out, err = sluice("keys", "create", "-kind", "check", "-name", "cli", "-json")
	if err != nil || json.Unmarshal([]byte(out), &key) != nil || !strings.HasPrefix(key.Secret, "sk_check_") {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	env["SLUICE_CHECK_KEY"] = key.Secret
	// Rotated: a new secret, the old one working on for the grace.
	out, err = sluice("keys", "rotate", "-grace", "1h", key.Key.ID)
	if err != nil || !regexp.MustCompile(`rotated key `+key.Key.ID+` into \S+\nsecret\s+sk_check_\S+`).MatchString(out) || !strings.Contains(out, "works until") {
		t.Fatalf("keys rotate: %v\n%s", err, out)
	}
	if out, err = sluice("keys", "list"); err != nil || strings.Count(out, " cli ") != 2 {
		t.Fatalf("keys list after a rotation: %v\n%s", err, out)
	}
	var expiring struct {
		Key struct {
			ID        string
			ExpiresAt time.Time
		}
	}
	out, err = sluice("keys", "create", "-kind", "check", "-name", "trial", "-for", "720h", "-json")
	if err != nil || json.Unmarshal([]byte(out), &expiring) != nil || time.Until(expiring.Key.ExpiresAt) < 719*time.Hour {
		t.Fatalf("keys create -for 720h: %v\n%s", err, out)
	}
	if out, err = sluice("keys", "list"); err != nil || !strings.Contains(out, "EXPIRES") || !strings.Contains(out, expiring.Key.ExpiresAt.Format("2006-01-02")) {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
	// A revoked key leaves the list, unless it is asked for.
	if out, err = sluice("keys", "revoke", expiring.Key.ID); err != nil {
		t.Fatalf("keys revoke: %v\n%s", err, out)
	}
	if out, err = sluice("keys", "list"); err != nil || strings.Contains(out, "trial") || !strings.Contains(out, "cli") {
		t.Fatalf("keys list after a revocation: %v\n%s", err, out)
	}
	if out, err = sluice("keys", "list", "-revoked"); err != nil || !strings.Contains(out, "trial") {
		t.Fatalf("keys list -revoked: %v\n%s", err, out)
	}
	// The new key and rule reach the decider within moments (the config
	// watch); until then the key is unknown.
	var rejected bool
	deadline := time.Now().Add(10 * time.Second)
	for !rejected && time.Now().Before(deadline) {
		out, err = sluice("check", "-tier", "pro", "client_id=cli-user", "route=/cli")
		switch {
		case connect.CodeOf(err) == connect.CodeUnauthenticated:
			time.Sleep(20 * time.Millisecond)
		case errors.Is(err, errRejected):
			rejected = strings.Contains(out, "rejected") && strings.Contains(out, "burst")
		case err != nil || !strings.Contains(out, "allowed"):
			t.Fatalf("check: %v\n%s", err, out)
		}
	}
	if !rejected {
		t.Fatal("the 2-per-hour rule never rejected")
	}
	// A peek says the same without consuming: rejected for cli-user, and
	// allowed (exit 0) for a client with its two left.
	if out, err := sluice("check", "-peek", "-tier", "pro", "client_id=cli-user", "route=/cli"); !errors.Is(err, errRejected) || !strings.Contains(out, "rejected") {
		t.Fatalf("check -peek of a rejected client: %v\n%s", err, out)
	}
	for range 3 {
		if out, err := sluice("check", "-peek", "-tier", "pro", "client_id=cli-other", "route=/cli"); err != nil || !strings.Contains(out, "allowed") {
			t.Fatalf("check -peek: %v\n%s", err, out)
		}
	}
	// -json answers as POST /v1/check does: its field names, waits in ms.
	out, err = sluice("check", "-json", "-peek", "-tier", "pro", "client_id=cli-user", "route=/cli")
	var ans struct {
		Allowed bool
		Rules   []map[string]any
	}
	if !errors.Is(err, errRejected) || json.Unmarshal([]byte(out), &ans) != nil || len(ans.Rules) == 0 {
		t.Fatalf("check -json: %v\n%s", err, out)
	}
	if _, ok := ans.Rules[0]["reset_after_ms"]; !ok || ans.Rules[0]["rule"] == nil || strings.Contains(out, "resetAfter") {
		t.Fatalf("check -json does not answer as the HTTP API: %s", out)
	}

	// The request's own limit decides in place of the tier's rules: the
	// rejected client gets its own 1 a minute.
	for i, want := range []string{"allowed", "rejected"} {
		out, err := sluice("check", "-limit", "1/1m", "-tier", "pro", "client_id=cli-user", "route=/cli")
		if !strings.Contains(out, want) || !strings.Contains(out, "limit/60s/client_id,route") {
			t.Fatalf("check -limit %d: %v\n%s", i, err, out)
		}
	}
	if _, err := sluice("check", "-limit", "1/soon", "client_id=cli-user"); !errors.Is(err, errUsage) {
		t.Fatalf("check -limit 1/soon: %v", err)
	}
	// Its algorithm may be named: a token bucket counts apart.
	if out, err := sluice("check", "-limit", "1/1m/token_bucket", "-tier", "pro", "client_id=cli-user", "route=/cli"); err != nil ||
		!strings.Contains(out, "allowed") || !strings.Contains(out, "limit/token_bucket/60s/client_id,route") {
		t.Fatalf("check -limit 1/1m/token_bucket: %v\n%s", err, out)
	}
	for _, bad := range []string{"1/1m/fastest", "1/1m/concurrency"} { // no algorithm, one a request may not bring
		if _, err := sluice("check", "-limit", bad, "client_id=cli-user"); !errors.Is(err, errUsage) {
			t.Fatalf("check -limit %s: %v", bad, err)
		}
	}

	if out, err := sluice("check", "-tier", "pro", "client_id=blocked-1", "route=/cli"); !errors.Is(err, errRejected) || !strings.Contains(out, "blocklist") {
		t.Fatalf("check of a blocked client: %v\n%s", err, out)
	}
	// An adaptive concurrency rule, shared between plans; shares adding up
	// to more than the limit are refused.
	if out, err := sluice("rules", "create", "-tier", "pro", "-name", "backend", "-algorithm", "adaptive_concurrency", "-limit", "200", "-floor", "2",
		"-window", "500ms", "-lease-ttl", "30s", "-adaptation", "aimd", "-partition-by", "plan", "-partitions", "gold=0.6,free=0.3", "-match", "route=/backend"); err != nil {
		t.Fatalf("rules create -algorithm adaptive_concurrency: %v\n%s", err, out)
	}
	if out, err := sluice("rules", "create", "-tier", "pro", "-name", "backend2", "-algorithm", "adaptive_concurrency", "-limit", "200",
		"-window", "500ms", "-lease-ttl", "30s", "-partition-by", "plan", "-partitions", "gold=0.9,free=0.3"); err == nil || !strings.Contains(err.Error(), "invalid rule") {
		t.Fatalf("shares adding up to 1.2: %v\n%s", err, out)
	}
	// A concurrency rule: a check takes a lease, which its answer names;
	// the next finds the one slot taken until -release -lease ends it.
	if out, err := sluice("rules", "create", "-tier", "pro", "-name", "jobs", "-algorithm", "concurrency", "-limit", "1", "-lease-ttl", "1h", "-match", "route=/jobs"); err != nil {
		t.Fatalf("rules create -algorithm concurrency: %v\n%s", err, out)
	}
	leaseLine := regexp.MustCompile(`(?m)^lease (~[0-9a-f]{14}): held until its TTL`)
	var lease []string
	for deadline := time.Now().Add(10 * time.Second); lease == nil; time.Sleep(20 * time.Millisecond) {
		out, err := sluice("check", "-tier", "pro", "client_id=worker", "route=/jobs")
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("check of a concurrency rule: %v\n%s", err, out)
		}
		lease = leaseLine.FindStringSubmatch(out) // nil until the rule reaches the decider
	}
	if out, err := sluice("check", "-tier", "pro", "client_id=worker", "route=/jobs"); !errors.Is(err, errRejected) {
		t.Fatalf("a second lease of a limit of one: %v\n%s", err, out)
	}
	if _, err := sluice("check", "-release", "client_id=worker", "route=/jobs"); !errors.Is(err, errUsage) {
		t.Fatalf("-release without -lease: %v", err)
	}
	if out, err := sluice("check", "-release", "-lease", lease[1], "-tier", "pro", "client_id=worker", "route=/jobs"); err != nil || !strings.Contains(out, "released lease "+lease[1]) {
		t.Fatalf("check -release -lease: %v\n%s", err, out)
	}
	if out, err := sluice("check", "-tier", "pro", "client_id=worker", "route=/jobs"); err != nil || !leaseLine.MatchString(out) {
		t.Fatalf("a lease after the release: %v\n%s", err, out)
	}
	// An override of a rule named tier/rule: one client gets 50 a second
	// on pro's per-client rule.
	if out, err := sluice("overrides", "create", "-identifier", "partner", "-rule", "pro/per-client", "-limit", "50", "-window", "1s", "-for", "24h"); err != nil || !strings.Contains(out, "created override") {
		t.Fatalf("overrides create -rule TIER/RULE: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "list", "-identifier", "partner"); err != nil || !regexp.MustCompile(`partner\s+-\s+pro/per-client\s+50\s+1s\s`).MatchString(out) {
		t.Fatalf("overrides list names the rule as TIER/RULE: %v\n%s", err, out)
	}
	// Twice: the error names the override there is, to update.
	if _, err := sluice("overrides", "create", "-identifier", "partner", "-rule", "pro/per-client", "-limit", "60"); connect.CodeOf(err) != connect.CodeAlreadyExists ||
		!regexp.MustCompile(`^partner has that override already, (\S+) \(sluice overrides update (\S+) changes it\)`).MatchString(describe(err)) {
		t.Fatalf("an override made twice: %v", describe(err))
	}
	if _, err := sluice("overrides", "create", "-identifier", "partner2", "-rule", "pro/nope", "-limit", "5", "-window", "1s"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("an override of no rule: %v", err)
	}
	// An override keeps what its flags do not set from the rule: free/login
	// is a sliding window of 5 a minute, raised to 50 (and its update, to
	// 20 a second, stays a sliding window).
	overrideOf := func(ident string) *sluicev1.Override {
		t.Helper()
		out, err := sluice("overrides", "list", "-identifier", ident, "-json")
		var list sluicev1.ListOverridesResponse
		if err != nil || protojson.Unmarshal([]byte(out), &list) != nil || len(list.Overrides) != 1 {
			t.Fatalf("overrides list -identifier %s -json: %v\n%s", ident, err, out)
		}
		return list.Overrides[0]
	}
	if _, err := sluice("overrides", "create", "-identifier", "slowpoke", "-rule", "free/login", "-limit", "50", "-for", "24h"); err != nil {
		t.Fatalf("overrides create -rule free/login -limit 50: %v", err)
	}
	slowpoke := overrideOf("slowpoke")
	if p := slowpoke.GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_SLIDING_WINDOW || p.GetLimit() != 50 || p.GetWindow().AsDuration() != time.Minute {
		t.Fatalf("slowpoke's override: %v", p)
	}
	if _, err := sluice("overrides", "update", "-limit", "20", "-window", "1s", slowpoke.Id); err != nil {
		t.Fatalf("overrides update -limit 20 -window 1s: %v", err)
	}
	if p := overrideOf("slowpoke").GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_SLIDING_WINDOW || p.GetLimit() != 20 || p.GetWindow().AsDuration() != time.Second {
		t.Fatalf("slowpoke's override updated: %v", p)
	}
	// A burst grows with the limit: partner's 50 a second, 10 at once,
	// doubled allows 20 at once.
	partner := overrideOf("partner")
	if _, err := sluice("overrides", "update", "-burst", "10", partner.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := sluice("overrides", "update", "-limit", "100", partner.Id); err != nil {
		t.Fatal(err)
	}
	if p := overrideOf("partner").GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET || p.GetLimit() != 100 || p.GetBurst() != 20 || p.GetWindow().AsDuration() != time.Second {
		t.Fatalf("partner's override doubled: %v", p)
	}
	// With -algorithm the flags are the parameters, whole: a GCRA of 5
	// needs its window.
	if _, err := sluice("overrides", "create", "-identifier", "odd", "-rule", "pro/per-client", "-algorithm", "gcra", "-limit", "5"); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(describe(err), "params.window") {
		t.Fatalf("an override naming its algorithm without a window: %v (%s)", err, describe(err))
	}
	// A client blocked for an hour by an override.
	if out, err := sluice("overrides", "create", "-identifier", "banned-1", "-block", "-for", "1h"); err != nil || !strings.Contains(out, "created override") {
		t.Fatalf("overrides create -block: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "list"); err != nil || !strings.Contains(out, "banned-1") || !strings.Contains(out, "true") || strings.Contains(out, "never") {
		t.Fatalf("overrides list: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "list", "-identifier", "banned-"); err != nil || !strings.Contains(out, "banned-1") || strings.Contains(out, "partner") {
		t.Fatalf("overrides list -identifier banned-: %v\n%s", err, out)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, err := sluice("check", "client_id=banned-1")
		if errors.Is(err, errRejected) && strings.Contains(out, "blocked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the blocked client: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An address blocked: an override on another descriptor than client_id,
	// listed as ip=…; a descriptor's name that cannot be one is refused by
	// the field's name.
	if _, err := sluice("overrides", "create", "-descriptor", "bad key", "-identifier", "x", "-block"); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(describe(err), "descriptor_key") {
		t.Fatalf("an override on a malformed descriptor: %v (%s)", err, describe(err))
	}
	if out, err := sluice("overrides", "create", "-descriptor", "ip", "-identifier", "10.0.0.7", "-block"); err != nil || !strings.Contains(out, "created override") {
		t.Fatalf("overrides create -descriptor ip -block: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "list", "-identifier", "10.0.0."); err != nil || !strings.Contains(out, "ip=10.0.0.7") {
		t.Fatalf("overrides list -identifier 10.0.0.: %v\n%s", err, out)
	}
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := sluice("check", "client_id=someone", "ip=10.0.0.7")
		if errors.Is(err, errRejected) && strings.Contains(out, "blocked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a client from the blocked address: %v\n%s", err, out)
		}
	}
	if out, err := sluice("check", "client_id=someone", "ip=10.0.0.8"); err != nil || !strings.Contains(out, "allowed") {
		t.Fatalf("a client from another address: %v\n%s", err, out)
	}
	// Unblocked in place: the override becomes a move to the pro tier.
	out, err = sluice("overrides", "list", "-identifier", "banned-1", "-json")
	var banned struct{ Overrides []struct{ ID string } }
	if err != nil || json.Unmarshal([]byte(out), &banned) != nil || len(banned.Overrides) != 1 {
		t.Fatalf("overrides list -json: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "update", "-block=false", "-tier", "pro", "-for", "0", banned.Overrides[0].ID); err != nil || !strings.Contains(out, "updated override") {
		t.Fatalf("overrides update: %v\n%s", err, out)
	}
	if out, err := sluice("overrides", "list", "-identifier", "banned-1"); err != nil || !regexp.MustCompile(`banned-1\s+pro\s.*false\s+never`).MatchString(out) {
		t.Fatalf("overrides list after the update: %v\n%s", err, out)
	}
	for deadline = time.Now().Add(10 * time.Second); ; {
		out, err := sluice("check", "client_id=banned-1")
		if err == nil && strings.Contains(out, "allowed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unblocked client: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := sluice("overrides", "update", "-tier", "pro", "00000000-0000-0000-0000-000000000000"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("an update of no override: %v", err)
	}
	// A reset gives cli-user the 2 an hour again.
	if out, err := sluice("reset", "-tier", "pro", "client_id=cli-user", "route=/cli"); err != nil || !strings.Contains(out, "reset burst") {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if out, err := sluice("check", "-peek", "-tier", "pro", "-cost", "2", "client_id=cli-user", "route=/cli"); err != nil || !strings.Contains(out, "allowed") {
		t.Fatalf("check -peek after the reset: %v\n%s", err, out)
	}

	// The deciders, for the operator: the dev decider enforces the demo
	// tenant's config.
	if _, err := sluice("deciders", "list"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("deciders list with an admin key: %v", err)
	}
	env["SLUICE_KEY"] = regexp.MustCompile(`operator key\s+(\S+)`).FindStringSubmatch(banner)[1]
	// With the tenant's latest version beside it (the decider's is no
	// later), and what it reports of itself: on Redis, its breaker closed.
	out, err = sluice("deciders", "list")
	m := regexp.MustCompile(`(?m)^dev\s+\S+ \(\d+ s ago\)\s+demo\s+(\d+)\s+(\d+)\s+closed\s+\d+\s+\d+\s+\d+`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("deciders list: %v\n%s", err, out)
	}
	if enforced, latest := mustInt(t, m[1]), mustInt(t, m[2]); enforced < 1 || latest < enforced {
		t.Fatalf("deciders list: the dev decider enforces version %d of demo, whose latest is %d\n%s", enforced, latest, out)
	}
	// The operator suspends the tenant: its checks are refused until it is
	// active again; only the flags given change.
	var tenants struct {
		Tenants []struct{ ID, Slug, Name string }
	}
	if out, err := sluice("tenants", "list", "-json"); err != nil || json.Unmarshal([]byte(out), &tenants) != nil || len(tenants.Tenants) == 0 {
		t.Fatalf("tenants list: %v\n%s", err, out)
	}
	demo := tenants.Tenants[0]
	if out, err := sluice("tenants", "list", "-slug", "de"); err != nil || !strings.Contains(out, demo.ID) {
		t.Fatalf("tenants list -slug de: %v\n%s", err, out)
	}
	if out, err := sluice("tenants", "list", "-slug", "dz"); err != nil || strings.Contains(out, demo.ID) {
		t.Fatalf("tenants list -slug dz: %v\n%s", err, out)
	}
	if _, err := sluice("tenants", "update", "-status", "asleep", demo.ID); !errors.Is(err, errUsage) {
		t.Fatalf("a status that is not one: %v", err)
	}
	checkUntil := func(want connect.Code) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := sluice("check", "-peek", "client_id=suspense")
			if connect.CodeOf(err) == want || (want == 0 && err == nil) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("check: %v, want code %v", err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if out, err := sluice("tenants", "update", "-status", "suspended", demo.ID); err != nil || !strings.Contains(out, "updated tenant demo") {
		t.Fatalf("tenants update -status suspended: %v\n%s", err, out)
	}
	checkUntil(connect.CodePermissionDenied)
	if out, err := sluice("tenants", "get", demo.ID); err != nil || !regexp.MustCompile(`(?m)^status\s+suspended$`).MatchString(out) {
		t.Fatalf("tenants get of a suspended tenant: %v\n%s", err, out)
	}
	if out, err := sluice("tenants", "update", "-status", "active", demo.ID); err != nil {
		t.Fatalf("tenants update -status active: %v\n%s", err, out)
	}
	checkUntil(0)
	if out, err := sluice("tenants", "get", demo.ID); err != nil || !strings.Contains(out, demo.Name) {
		t.Fatalf("the name changed: %v\n%s", err, out)
	}
	// A tenant is named by its slug as well as by its id.
	if out, err := sluice("tenants", "get", demo.Slug); err != nil || !strings.Contains(out, demo.ID) {
		t.Fatalf("tenants get SLUG: %v\n%s", err, out)
	}
	if out, err := sluice("tiers", "list", "-tenant", demo.Slug); err != nil || !strings.Contains(out, "free") {
		t.Fatalf("tiers list -tenant SLUG: %v\n%s", err, out)
	}
	if _, err := sluice("tiers", "list", "-tenant", "no-such-tenant"); connect.CodeOf(err) != connect.CodeNotFound && connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("tiers list -tenant of no tenant: %v", err)
	}

	env["SLUICE_KEY"] = "sk_admin_nonsense"
	if _, err := sluice("keys", "list"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a bad key: %v", err)
	}
	if _, err := sluice("rules", "frobnicate"); !errors.Is(err, errUsage) {
		t.Fatalf("unknown verb: %v", err)
	}
}

// listedRule is what the tests read of a rule in `rules list -json`.
type listedRule struct {
	ID, Name, FailureMode, Message string
	Enabled, Shadow                bool
	Params                         struct {
		Algorithm, Limit, WarmUp, Window, Calendar, TimeZone string
		ColdFactor                                           float64
	}
}

// TestEditRetriesWhileAborted: an update refused because another change came
// between its read and its write is read and applied again; other errors,
// and contention that does not end, are the command's answer.
func TestEditRetriesWhileAborted(t *testing.T) {
	aborted := connect.NewError(connect.CodeAborted, errors.New("rule a changed since it was read"))
	for _, c := range []struct {
		name       string
		answers    []error
		calls      int
		wantCode   connect.Code
		wantRounds bool
	}{
		{"written at once", []error{nil}, 1, 0, false},
		{"written on the third read", []error{aborted, aborted, nil}, 3, 0, false},
		{"another error ends it", []error{aborted, connect.NewError(connect.CodeNotFound, errors.New("no rule"))}, 2, connect.CodeNotFound, false},
		{"contention that does not end", []error{aborted, aborted, aborted, aborted, aborted, aborted, aborted}, 5, connect.CodeAborted, true},
	} {
		calls := 0
		err := edit(func() error {
			calls++
			return c.answers[calls-1]
		})
		if calls != c.calls || (err == nil) != (c.wantCode == 0) || (err != nil && connect.CodeOf(err) != c.wantCode) {
			t.Errorf("%s: %d calls, %v; want %d calls, code %v", c.name, calls, err, c.calls, c.wantCode)
		}
		if c.wantRounds && (err == nil || !strings.Contains(err.Error(), "changed by others 5 times")) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// mustInt is s as a number, failing t when it is none.
func mustInt(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
