package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/tlstest"
)

// The binary's run starts on a fresh schema, serves the API over plain
// HTTP/2 to a gRPC client, answers health checks, and stops cleanly.
func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"DATABASE_URL": pgtest.Schema(t), "SLUICE_OPERATOR_KEY": "op-secret", "SLUICE_DECIDER_KEY": "decider-secret"}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the admin listener
	if err != nil {
		t.Fatal(err)
	}
	admin := adminLn.Addr().String()
	adminLn.Close()
	base, done := start(t, ctx, env, "-admin-addr", admin)

	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	// Metrics are the admin listener's alone.
	if resp, err := http.Get(base + "/metrics"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("the API's port answers /metrics: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + admin + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the admin listener's /metrics: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Ready only while the database answers with a clean schema: a failed
	// migration (marked dirty) takes it out, and back once repaired.
	db, err := pgx.Connect(ctx, env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	for _, dirty := range []bool{true, false} {
		if _, err := db.Exec(ctx, `UPDATE schema_migrations SET dirty = $1`, dirty); err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{true: 503, false: 200}[dirty]
		deadline := time.Now().Add(10 * time.Second)
		for code := 0; code != want; {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz %d with the schema dirty=%v, want %d", code, dirty, want)
			}
			if resp, err := http.Get(base + "/readyz"); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	client := sluicev1connect.NewTenantServiceClient(h2cClient(), base, connect.WithGRPC())
	req := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "acme", Name: "Acme"}})
	req.Header().Set("Authorization", "Bearer op-secret")
	res, err := client.CreateTenant(ctx, req)
	if err != nil || res.Msg.Tenant.Id == "" {
		t.Fatalf("create tenant over gRPC: %v", err)
	}
	// A decider's config watch, which lives until the decider hangs up,
	// must not hold the shutdown up to its 10 s timeout.
	wreq := connect.NewRequest(&sluicev1.WatchRequest{})
	wreq.Header().Set("Authorization", "Bearer decider-secret")
	watch, err := sluicev1connect.NewConfigServiceClient(h2cClient(), base, connect.WithGRPC()).Watch(context.Background(), wreq)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer watch.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop with a config watch open")
	}
	for watch.Receive() {
	}
}

// start runs the binary's run with env and the extra flags until ctx
// ends, and returns its base URL and the channel of run's result.
func start(t *testing.T, ctx context.Context, env map[string]string, extra ...string) (string, <-chan error) {
	t.Helper()
	return launch(ctx, env, extra...)(t)
}

// launch is start in two steps, so that several control planes can start
// at once: it starts run and returns what waits for it to serve.
func launch(ctx context.Context, env map[string]string, extra ...string) func(t *testing.T) (string, <-chan error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := []string{"-addr", "127.0.0.1:0"}
		if !slices.Contains(extra, "-admin-addr") {
			args = append(args, "-admin-addr", "127.0.0.1:0")
		}
		done <- run(ctx, append(args, extra...), func(k string) string { return env[k] }, pw, io.Discard)
		pw.Close()
	}()
	return func(t *testing.T) (string, <-chan error) {
		t.Helper()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			t.Fatalf("no banner: %v (run: %v)", err, <-done)
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		return strings.Fields(line[strings.Index(line, "http"):])[0], done
	}
}

// Two replicas of the control plane on one database, as the Kubernetes
// manifest runs them: they start at the same moment (each applies the
// migrations), a change made through one reaches a decider watching the
// other, a key revoked through one is refused by the other at once, and a
// decider's sync through one shows in the operator's list through the
// other.
func TestReplicasShareOneDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"DATABASE_URL": pgtest.EmptySchema(t), "SLUICE_OPERATOR_KEY": "op-secret", "SLUICE_DECIDER_KEY": "decider-secret"}
	waitA, waitB := launch(ctx, env), launch(ctx, env)
	a, _ := waitA(t)
	b, _ := waitB(t)
	as := func(key string, req interface{ Header() http.Header }) {
		req.Header().Set("Authorization", "Bearer "+key)
	}

	treq := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "acme", Name: "Acme"}})
	as("op-secret", treq)
	tenant, err := sluicev1connect.NewTenantServiceClient(h2cClient(), a).CreateTenant(ctx, treq)
	if err != nil {
		t.Fatal(err)
	}
	acme := tenant.Msg.Tenant
	kreq := connect.NewRequest(&sluicev1.CreateKeyRequest{TenantId: acme.Id, Kind: sluicev1.KeyKind_KEY_KIND_ADMIN})
	as("op-secret", kreq)
	admin, err := sluicev1connect.NewKeyServiceClient(h2cClient(), a).CreateKey(ctx, kreq)
	if err != nil {
		t.Fatal(err)
	}

	wreq := connect.NewRequest(&sluicev1.WatchRequest{Since: map[string]int64{acme.Id: acme.ConfigVersion}})
	as("decider-secret", wreq)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	watch, err := sluicev1connect.NewConfigServiceClient(h2cClient(), b, connect.WithGRPC()).Watch(wctx, wreq)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	creq := connect.NewRequest(&sluicev1.CreateTierRequest{Name: "pro"})
	as(admin.Msg.Secret, creq)
	tier, err := sluicev1connect.NewTierServiceClient(h2cClient(), a).CreateTier(ctx, creq)
	if err != nil {
		t.Fatal(err)
	}
	delivered := false
	for !delivered && watch.Receive() {
		m := watch.Msg()
		delivered = m.TenantId == acme.Id && m.Version >= tier.Msg.ConfigVersion
	}
	if !delivered {
		t.Fatalf("the watch on the other replica ended before version %d: %v", tier.Msg.ConfigVersion, watch.Err())
	}

	tiersB := sluicev1connect.NewTierServiceClient(h2cClient(), b)
	list := func() error {
		req := connect.NewRequest(&sluicev1.ListTiersRequest{})
		as(admin.Msg.Secret, req)
		_, err := tiersB.ListTiers(ctx, req)
		return err
	}
	if err := list(); err != nil {
		t.Fatalf("the admin key on the other replica: %v", err)
	}
	rreq := connect.NewRequest(&sluicev1.RevokeKeyRequest{TenantId: acme.Id, KeyId: admin.Msg.Key.Id})
	as("op-secret", rreq)
	if _, err := sluicev1connect.NewKeyServiceClient(h2cClient(), a).RevokeKey(ctx, rreq); err != nil {
		t.Fatal(err)
	}
	if err := list(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("the revoked admin key on the other replica: %v, want unauthenticated", err)
	}

	sreq := connect.NewRequest(&sluicev1.GetSnapshotsRequest{Decider: "host-1/42"})
	as("decider-secret", sreq)
	if _, err := sluicev1connect.NewConfigServiceClient(h2cClient(), b).GetSnapshots(ctx, sreq); err != nil {
		t.Fatal(err)
	}
	dreq := connect.NewRequest(&sluicev1.ListDecidersRequest{})
	as("op-secret", dreq)
	ds, err := sluicev1connect.NewDeciderServiceClient(h2cClient(), a).ListDeciders(ctx, dreq)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Msg.Deciders) != 1 || ds.Msg.Deciders[0].Name != "host-1/42" || ds.Msg.Deciders[0].ConfigVersions[acme.Id] < tier.Msg.ConfigVersion {
		t.Fatalf("deciders through the first replica: %v", ds.Msg.Deciders)
	}
}

// With -tls-cert and -tls-key the port serves HTTPS only: gRPC over the
// HTTP/2 that ALPN chose, HTTP/1.1 to a client that offers nothing else;
// a plaintext request gets no answer of the API. A key that cannot be
// read stops the control plane at start.
func TestServesHTTPS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.ServerFiles(t, t.TempDir(), 1)
	env := map[string]string{"DATABASE_URL": pgtest.Schema(t), "SLUICE_OPERATOR_KEY": "op-secret"}
	base, done := start(t, ctx, env, "-tls-cert", cert, "-tls-key", key)
	defer func() { cancel(); <-done }()
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("banner says %s, want an https:// URL", base)
	}

	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}}
	req := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "acme", Name: "Acme"}})
	req.Header().Set("Authorization", "Bearer op-secret")
	if res, err := sluicev1connect.NewTenantServiceClient(h2, base, connect.WithGRPC()).CreateTenant(ctx, req); err != nil || res.Msg.Tenant.Id == "" {
		t.Fatalf("create tenant over gRPC on TLS: %v", err)
	}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	resp, err := h1.Get(base + "/console/")
	if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 1 {
		t.Fatalf("the console over HTTP/1.1 on TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("a plaintext request was answered by a TLS port")
		}
	}

	err = run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-tls-cert", cert, "-tls-key", filepath.Join(t.TempDir(), "none.pem")},
		func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "tls") {
		t.Fatalf("a missing key: %v, want a tls error", err)
	}
}

// waitReady polls base's /readyz until it answers want.
func waitReady(t *testing.T, base string, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for code := 0; code != want; {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d, want %d", code, want)
		}
		if resp, err := http.Get(base + "/readyz"); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// While its database is down the control plane stays up, not ready, and
// answers Unavailable (retry) rather than an internal error; once it is
// back, calls succeed again and a decider's config watch, open across the
// outage, delivers what changed after it.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	db := pgtest.Private(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := start(t, ctx, map[string]string{"DATABASE_URL": db.URL(), "SLUICE_OPERATOR_KEY": "op-secret", "SLUICE_DECIDER_KEY": "decider-secret"})
	tenants := sluicev1connect.NewTenantServiceClient(h2cClient(), base, connect.WithGRPC())
	tiers := sluicev1connect.NewTierServiceClient(h2cClient(), base)
	create := func(slug string) (*sluicev1.Tenant, error) {
		req := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: slug, Name: slug}})
		req.Header().Set("Authorization", "Bearer op-secret")
		res, err := tenants.CreateTenant(ctx, req)
		if err != nil {
			return nil, err
		}
		return res.Msg.Tenant, nil
	}
	acme, err := create("acme")
	if err != nil {
		t.Fatal(err)
	}
	wreq := connect.NewRequest(&sluicev1.WatchRequest{Since: map[string]int64{acme.Id: acme.ConfigVersion}})
	wreq.Header().Set("Authorization", "Bearer decider-secret")
	watch, err := sluicev1connect.NewConfigServiceClient(h2cClient(), base, connect.WithGRPC()).Watch(ctx, wreq)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()

	if err := db.Stop(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, base, http.StatusServiceUnavailable)
	if _, err := create("globex"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("create a tenant with the database down: %v, want unavailable", err)
	}
	lreq := connect.NewRequest(&sluicev1.ListTiersRequest{TenantId: acme.Id})
	lreq.Header().Set("Authorization", "Bearer op-secret")
	if _, err := tiers.ListTiers(ctx, lreq); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("list tiers with the database down: %v, want unavailable", err)
	}
	rreq := connect.NewRequest(&sluicev1.GetTopClientsRequest{TenantId: acme.Id, From: timestamppb.New(time.Now().Add(-time.Hour)), To: timestamppb.Now()})
	rreq.Header().Set("Authorization", "Bearer op-secret")
	if _, err := sluicev1connect.NewReportServiceClient(h2cClient(), base).GetTopClients(ctx, rreq); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a report with the database down: %v, want unavailable", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the control plane stopped with its database: %v", err)
	default:
	}

	if _, err := db.Start(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, base, http.StatusOK)
	creq := connect.NewRequest(&sluicev1.CreateTierRequest{TenantId: acme.Id, Name: "pro"})
	creq.Header().Set("Authorization", "Bearer op-secret")
	res, err := tiers.CreateTier(ctx, creq)
	if err != nil {
		t.Fatalf("create a tier once the database is back: %v", err)
	}
	for watch.Receive() {
		if m := watch.Msg(); m.TenantId == acme.Id && m.Version >= res.Msg.ConfigVersion {
			return
		}
	}
	t.Fatalf("the watch ended before delivering version %d: %v", res.Msg.ConfigVersion, watch.Err())
}

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do to a plaintext server.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// With SLUICE_AUDIT_RETENTION the control plane deletes audit rows older
// than it, from its start on, and keeps the newer ones; a negative
// retention is refused. Overrides expired longer than the default
// override retention (7 days) go too, and the others stay.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pgtest.Schema(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, `INSERT INTO audit_log (actor, action, resource, at) VALUES
		('operator', 'create', 'tenant', now() - interval '2 days'), ('operator', 'create', 'tenant', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `WITH t AS (INSERT INTO tenants (slug, name) VALUES ('acme', 'Acme') RETURNING id)
		INSERT INTO overrides (tenant_id, identifier, block, expires_at)
		SELECT id, c.identifier, true, now() - c.ago FROM t,
			(VALUES ('gone', interval '8 days'), ('recent', interval '1 day')) AS c (identifier, ago)`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": url, "SLUICE_AUDIT_RETENTION": "24h"}
	start(t, ctx, env)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var old, recent int
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE at < now() - interval '1 day'), count(*) FILTER (WHERE at >= now() - interval '1 day' AND actor = 'operator') FROM audit_log`).Scan(&old, &recent); err != nil {
			t.Fatal(err)
		}
		if recent != 1 {
			t.Fatalf("%d recent audit rows, want the 1 kept", recent)
		}
		rows, _ := db.Query(ctx, `SELECT identifier FROM overrides ORDER BY identifier`)
		overrides, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if old == 0 && slices.Equal(overrides, []string{"recent"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not pruned: %d audit rows older than the retention, overrides %q (want [recent])", old, overrides)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, flag := range []string{"-audit-retention", "-override-retention"} {
		err = run(ctx, []string{flag, "-1h"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Fatalf("a negative %s: %v", flag, err)
		}
	}
	err = run(ctx, []string{"-trusted-proxies", "10.0.0.0/8,10.0.0.0/99"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `-trusted-proxies: trusted proxy "10.0.0.0/99"`) {
		t.Fatalf("a malformed trusted proxy: %v", err)
	}
}

// A malformed DATABASE_URL is refused without its password showing, in
// the error or in what the binary writes.
func TestMalformedDatabaseURLKeepsItsPassword(t *testing.T) {
	for _, u := range []string{"postgres://u:s3cretpw@127.0.0.1:bad/db", "postgres://u:s3cretpw@127.0.0.1:5432/%zz"} {
		var out strings.Builder
		err := run(context.Background(), []string{"-database-url", u}, func(string) string { return "" }, &out, &out)
		if err == nil {
			t.Fatalf("%s: started", u)
		}
		if strings.Contains(err.Error()+out.String(), "s3cretpw") {
			t.Fatalf("%s: the password shows: %v\n%s", u, err, out.String())
		}
	}
}

// With SLUICE_OPERATOR_KEY_FILE the operator key is read from a file and
// follows it: rewritten, the new key is accepted and the old refused
// within seconds, without a restart. A missing key file stops the start.
func TestOperatorKeyFileRotates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keyFile := filepath.Join(t.TempDir(), "operator-key")
	if err := os.WriteFile(keyFile, []byte("op-old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": pgtest.Schema(t), "SLUICE_OPERATOR_KEY_FILE": keyFile}
	base, _ := start(t, ctx, env)
	client := sluicev1connect.NewTenantServiceClient(http.DefaultClient, base)
	list := func(key string) connect.Code {
		req := connect.NewRequest(&sluicev1.ListTenantsRequest{})
		req.Header().Set("Authorization", "Bearer "+key)
		_, err := client.ListTenants(ctx, req)
		if err == nil {
			return 0
		}
		return connect.CodeOf(err)
	}
	if old, new := list("op-old"), list("op-new"); old != 0 || new != connect.CodeUnauthenticated {
		t.Fatalf("before the rotation: old key %v, new key %v", old, new)
	}
	if err := os.WriteFile(keyFile, []byte("op-new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same size: only the modification time tells the change.
	if err := os.Chtimes(keyFile, time.Now(), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for list("op-new") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten key file was not followed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := list("op-old"); code != connect.CodeUnauthenticated {
		t.Fatalf("the old key after the rotation: %v", code)
	}

	missing := map[string]string{"DATABASE_URL": env["DATABASE_URL"], "SLUICE_OPERATOR_KEY_FILE": filepath.Join(t.TempDir(), "missing")}
	if err := run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "off"}, func(k string) string { return missing[k] }, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "SLUICE_OPERATOR_KEY_FILE") {
		t.Fatalf("start with a missing key file: %v", err)
	}
}

// Behind a layer-4 balancer speaking the PROXY protocol, the invalid-key
// budget is each caller's, by the address its header names: one caller
// guessing keys is held back, another through the same balancer is not.
func TestAuthFailureBudgetBehindProxyProtocol(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"DATABASE_URL": pgtest.Schema(t), "SLUICE_OPERATOR_KEY": "op-secret"}
	base, _ := start(t, ctx, env, "-auth-failures", "2", "-proxy-protocol", "127.0.0.1")
	// call lists tenants with a wrong key on a new connection from caller,
	// and returns the HTTP status.
	call := func(caller string) int {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PROXY TCP4 %s 192.0.2.1 40000 80\r\nPOST /sluice.v1.TenantService/ListTenants HTTP/1.1\r\nHost: x\r\n"+
			"Authorization: Bearer wrong\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", caller)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var got []int
	for range 3 {
		got = append(got, call("203.0.113.1"))
	}
	if want := []int{401, 401, 429}; !slices.Equal(got, want) {
		t.Fatalf("one caller's wrong keys: %v, want %v", got, want)
	}
	if code := call("203.0.113.2"); code != 401 {
		t.Fatalf("another caller behind the same balancer: %d, want 401 (its own budget)", code)
	}
}

// A variable that does not parse stops the control plane at start, named,
// before it touches the database.
func TestMalformedSettingStopsTheControlPlane(t *testing.T) {
	env := map[string]string{"SLUICE_AUDIT_RETENTION": "30", "SLUICE_AUTH_FAILURES": "many", "DATABASE_URL": "postgres://127.0.0.1:1/none"}
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin-addr", "off"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `SLUICE_AUDIT_RETENTION="30"`) || !strings.Contains(err.Error(), `SLUICE_AUTH_FAILURES="many"`) {
		t.Fatalf("run: %v, want both variables named", err)
	}
}

// trickle sends body to a connection's request a byte at a time, every
// pause, until it is sent or the server ends the connection, and says
// whether the server ended it first.
func trickle(c net.Conn, body []byte, pause time.Duration) (cutOff bool) {
	for i := range body {
		if _, err := c.Write(body[i : i+1]); err != nil {
			return true
		}
		time.Sleep(pause)
	}
	return false
}

// No slow client holds the control plane: a request whose body trickles
// in is cut off once -read-timeout has passed, over HTTP/1.1 and h2c; a
// large body without a valid key is refused before it is read; and a
// config watch, whose call lasts, outlives the timeout.
func TestSlowBodiesAreCutOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"DATABASE_URL": pgtest.Schema(t), "SLUICE_OPERATOR_KEY": "op-secret", "SLUICE_DECIDER_KEY": "decider-secret"}
	base, done := start(t, ctx, env, "-read-timeout", "500ms")
	defer func() { cancel(); <-done }()
	addr := strings.TrimPrefix(base, "http://")
	body := []byte(`{"tenant":"` + strings.Repeat("a", 200) + `"}`) // 200 bytes at 20 ms each: 4 s, well past the timeout

	t.Run("HTTP/1.1 with a valid key", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /sluice.v1.TierService/ListTiers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer op-secret\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		go func() { _, _ = io.Copy(io.Discard, c) }() // the answer, if any
		if !trickle(c, body, 20*time.Millisecond) {
			t.Fatal("the control plane read a trickled body to its end")
		}
	})
	t.Run("h2c with a valid key", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			defer pw.Close()
			for i := range body {
				if _, err := pw.Write(body[i : i+1]); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		req, _ := http.NewRequest("POST", base+"/sluice.v1.TierService/ListTiers", pr)
		req.Header.Set("Authorization", "Bearer op-secret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := h2cClient().Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("a trickled h2c body was read to its end: %d %s", resp.StatusCode, b)
			}
		}
		pr.CloseWithError(io.ErrClosedPipe)
	})
	t.Run("a large body without a valid key", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /sluice.v1.TierService/ListTiers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"+
			"Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n")
		// The answer comes without a byte of the body sent.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, " 401 ") {
			t.Fatalf("a 60,000-byte body under an invalid key: %q %v, want 401 before the body", line, err)
		}
	})
	t.Run("a config watch outlives the timeout", func(t *testing.T) {
		wreq := connect.NewRequest(&sluicev1.WatchRequest{})
		wreq.Header().Set("Authorization", "Bearer decider-secret")
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		watch, err := sluicev1connect.NewConfigServiceClient(h2cClient(), base, connect.WithGRPC()).Watch(wctx, wreq)
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Close()
		time.Sleep(time.Second) // twice the read timeout: the stream must live on
		creq := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: "late", Name: "Late"}})
		creq.Header().Set("Authorization", "Bearer op-secret")
		if _, err := sluicev1connect.NewTenantServiceClient(h2cClient(), base, connect.WithGRPC()).CreateTenant(ctx, creq); err != nil {
			t.Fatal(err)
		}
		for watch.Receive() {
			if watch.Msg().GetTenantId() != "" {
				return // the change reached the watch past the timeout
			}
		}
		t.Fatalf("the watch ended: %v", watch.Err())
	})
}
