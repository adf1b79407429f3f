package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/testkit/devtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// startDev runs `sluice dev` in-process on a free port and returns the
// banner's lines once it has printed them, and what stops it.
func startDev(t *testing.T, env map[string]string) (banner string, stop func() error) {
	t.Helper()
	return devtest.Start(t, func(ctx context.Context, out io.Writer) error {
		return run(ctx, []string{"dev", "-addr", "127.0.0.1:0"}, out, io.Discard, func(k string) string { return env[k] })
	})
}

// devEnv isolates a dev run: its own schema, key prefix and key file.
func devEnv(t *testing.T) map[string]string {
	_, prefix := redistest.Client(t)
	return map[string]string{"DATABASE_URL": pgtest.Schema(t), "REDIS_URL": "redis://" + redistest.Addr(t),
		"SLUICE_REDIS_PREFIX": prefix, "SLUICE_DEV_DIR": t.TempDir(), "SLUICE_GRPC_ADDR": "127.0.0.1:0",
		// Counted exactly however loaded the machine: a call over the 50ms
		// default would be answered by the demo rules' failure mode (open).
		"SLUICE_DECISION_BUDGET": "5s"}
}

func TestDevPrintsAWorkingCurlLineAndRejectsEventually(t *testing.T) {
	env := devEnv(t)
	banner, stop := startDev(t, env)
	curl := regexp.MustCompile(`(?m)^\s+try\s+(curl .*)$`).FindStringSubmatch(banner)
	if curl == nil {
		t.Fatalf("no curl line in the banner:\n%s", banner)
	}
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command("sh", "-c", curl[1]).Output()
		var dec struct{ Allowed bool }
		if err != nil || json.Unmarshal(out, &dec) != nil || !dec.Allowed {
			t.Fatalf("the printed curl line: %q, %v", out, err)
		}
	}
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner)[1]
	key := regexp.MustCompile(`check key\s+(\S+)`).FindStringSubmatch(banner)[1]
	rejected := false
	for i := 0; i < 20 && !rejected; i++ {
		req, _ := http.NewRequest("POST", api+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"bob"}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
		case 429:
			rejected = resp.Header.Get("Retry-After") != ""
		default:
			t.Fatalf("check %d: status %d", i, resp.StatusCode)
		}
	}
	if !rejected {
		t.Fatal("20 checks against a limit of 10 per minute were never rejected")
	}
	// The printed viewer key reads the demo's tiers, and changes nothing.
	viewer := regexp.MustCompile(`viewer key\s+(sk_viewer_\S+)`).FindStringSubmatch(banner)
	tiers := func(api, key string) int {
		req, _ := http.NewRequest("POST", api+"/sluice.v1.TierService/ListTiers", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if viewer == nil || tiers(api, viewer[1]) != 200 {
		t.Fatalf("no working viewer key in the banner:\n%s", banner)
	}
	if err := stop(); err != nil {
		t.Fatalf("stopping sluice dev: %v", err)
	}
	// A second run reuses the data: the same check key still works. A dev
	// directory of before viewer keys gets one.
	keysFile := filepath.Join(env["SLUICE_DEV_DIR"], "keys.json")
	var kept map[string]string
	if b, err := os.ReadFile(keysFile); err != nil || json.Unmarshal(b, &kept) != nil || kept["viewer"] != viewer[1] {
		t.Fatalf("keys.json: %v %v", kept, err)
	}
	delete(kept, "viewer")
	b, _ := json.Marshal(kept)
	if err := os.WriteFile(keysFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	banner2, stop2 := startDev(t, env)
	if got := regexp.MustCompile(`check key\s+(\S+)`).FindStringSubmatch(banner2)[1]; got != key {
		t.Fatalf("second run printed check key %s, the first %s", got, key)
	}
	api2 := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner2)[1]
	if v := regexp.MustCompile(`viewer key\s+(sk_viewer_\S+)`).FindStringSubmatch(banner2); v == nil || v[1] == viewer[1] || tiers(api2, v[1]) != 200 {
		t.Fatalf("the second run's viewer key:\n%s", banner2)
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	var stderr strings.Builder
	err := run(context.Background(), []string{"frobnicate"}, io.Discard, &stderr, func(string) string { return "" })
	if err != errUsage || !strings.Contains(stderr.String(), "unknown command") {
		t.Fatalf("err %v, stderr %q", err, stderr.String())
	}
}

// A server nobody runs is named as such, with the variables that say
// where the CLI looks.
func TestUnreachableServerSaysSo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	env := map[string]string{"SLUICE_SERVER": "http://" + addr, "SLUICE_KEY": "sk_admin_x", "SLUICE_DECIDER": "http://" + addr, "SLUICE_CHECK_KEY": "sk_check_x"}
	for _, args := range [][]string{{"tiers", "list"}, {"check", "client_id=a"}} {
		err := run(context.Background(), args, io.Discard, io.Discard, func(k string) string { return env[k] })
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(describe(err), "nothing listens there: is it running? (SLUICE_SERVER") {
			t.Errorf("%v against %s: %v (%s)", args, addr, err, describe(err))
		}
	}
}

// A second sluice dev on a port already taken stops before it touches the
// database: it seeds no keys of its own there (which its dev directory
// would hold) for a stack it never runs.
func TestDevOnATakenPortSeedsNothing(t *testing.T) {
	env := devEnv(t)
	banner, _ := startDev(t, env)
	addr := regexp.MustCompile(`API\s+http://(\S+)`).FindStringSubmatch(banner)[1]
	second := map[string]string{}
	for k, v := range env {
		second[k] = v
	}
	second["SLUICE_DEV_DIR"] = t.TempDir()
	err := run(context.Background(), []string{"dev", "-addr", addr}, io.Discard, io.Discard, func(k string) string { return second[k] })
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a second sluice dev on %s: %v", addr, err)
	}
	if _, err := os.Stat(filepath.Join(second["SLUICE_DEV_DIR"], "keys.json")); !os.IsNotExist(err) {
		t.Fatalf("the second run seeded keys: %v", err)
	}
}

// A fresh sluice dev on its default address and the CLI told nothing but
// where the dev directory is (no address flag or variable, no key): the
// CLI finds the address and the dev keys, and its commands answer.
func TestCLIFindsSluiceDevByItself(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.1:8080"); err != nil {
		t.Skipf("127.0.0.1:8080, sluice dev's default, is taken: %v", err)
	} else {
		ln.Close()
	}
	env := devEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		done <- run(ctx, []string{"dev"}, pw, io.Discard, func(k string) string { return env[k] })
		pw.Close()
	}()
	defer func() { cancel(); <-done }()
	sc := bufio.NewScanner(pr)
	var banner strings.Builder
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "Ctrl-C") {
		banner.WriteString(sc.Text() + "\n")
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !strings.Contains(banner.String(), "http://127.0.0.1:8080/console/") || !strings.Contains(banner.String(), "bin/sluice rules list") {
		t.Fatalf("banner:\n%s", &banner)
	}
	cli := func(args ...string) string {
		t.Helper()
		var out, errOut strings.Builder
		err := run(context.Background(), args, &out, &errOut, func(k string) string {
			if k == "SLUICE_DEV_DIR" {
				return env[k]
			}
			return ""
		})
		if err != nil && !(args[0] == "check" && errors.Is(err, errRejected)) {
			t.Fatalf("sluice %s: %v\n%s%s", strings.Join(args, " "), err, &out, &errOut)
		}
		return out.String()
	}
	if out := cli("rules", "list"); !strings.Contains(out, "per-client") {
		t.Fatalf("rules list: %q", out)
	}
	if out := cli("check", "client_id=alice"); !strings.Contains(out, "allowed") {
		t.Fatalf("check: %q", out)
	}
	cli("reports", "top")
}

// sluice dev -reset drops the dev database: it refuses a DATABASE_URL of
// the user's own rather than empty it.
func TestDevResetRefusesADatabaseOfYourOwn(t *testing.T) {
	env := devEnv(t)
	var errOut strings.Builder
	err := run(context.Background(), []string{"dev", "-reset", "-addr", "127.0.0.1:0"}, io.Discard, &errOut, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error()+errOut.String(), "DATABASE_URL") {
		t.Fatalf("sluice dev -reset with DATABASE_URL: %v %s, want a refusal naming DATABASE_URL", err, errOut.String())
	}
}

// On a machine without PostgreSQL, sluice dev (what make dev runs) stops
// with the command that installs it, as the README's first lines say.
func TestDevWithoutPostgreSQLSaysHowToInstallIt(t *testing.T) {
	t.Setenv("SLUICE_POSTGRES_BIN", t.TempDir()) // no initdb there: no binaries anywhere
	env := devEnv(t)
	env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/nothing?sslmode=disable"
	var errOut strings.Builder
	err := run(context.Background(), []string{"dev", "-addr", "127.0.0.1:0"}, io.Discard, &errOut, func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("sluice dev ran without PostgreSQL")
	}
	readme, rerr := os.ReadFile("../../README.md")
	if rerr != nil {
		t.Fatal(rerr)
	}
	for _, install := range []string{"sudo apt-get install -y postgresql", "brew install postgresql@16"} {
		if !strings.Contains(err.Error(), install) {
			t.Errorf("sluice dev without PostgreSQL: %v\nit does not say %q", err, install)
		}
		if !strings.Contains(string(readme), install) {
			t.Errorf("the README does not say %q", install)
		}
	}
}
