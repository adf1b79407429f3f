package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets tests run this binary's main in a child process (the test
// binary re-executed), as a user runs `sluice`.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_CHILD") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDevFallsBackToEmbeddedEverything starts `sluice dev` as a process
// with every service variable pointing at nothing: it must start a private
// PostgreSQL, decide in process and embed a Kafka broker, then enforce the
// demo's limits end to end, and stop cleanly on SIGINT.
func TestDevFallsBackToEmbeddedEverything(t *testing.T) {
	if _, err := postgresInstalled(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "dev", "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_CHILD=1", "SLUICE_DEV_DIR="+dir,
		"DATABASE_URL=postgres://postgres:pg-secret-1@127.0.0.1:1/nothing?sslmode=disable", "REDIS_URL=redis://:redis-secret-2@127.0.0.1:1",
		"KAFKA_BROKERS=127.0.0.1:1", "SLUICE_GRPC_ADDR=127.0.0.1:0")
	var logs bytes.Buffer // read after Wait
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	banner := make(chan string, 1)
	var printed strings.Builder // read after Wait
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			printed.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ctrl-C") {
				banner <- printed.String()
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var text string
	select {
	case text = <-banner:
	case err := <-exited:
		t.Fatalf("sluice dev exited: %v", err)
	case <-time.After(120 * time.Second):
		t.Fatal("no banner")
	}
	private := regexp.MustCompile(`private cluster in (\S+?),? tenant`).FindStringSubmatch(text)
	if private == nil || !strings.Contains(text, "in-process engine") || !strings.Contains(text, "embedded Kafka") {
		t.Fatalf("not every fallback was taken:\n%s", text)
	}
	if !strings.HasPrefix(private[1], dir) {
		t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(private[1])) })
	}
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(text)[1]
	key := regexp.MustCompile(`check key\s+(\S+)`).FindStringSubmatch(text)[1]
	statuses := map[int]int{}
	for range 12 { // the free tier allows 10 per minute
		req, _ := http.NewRequest("POST", api+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"dora"}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if statuses[200] != 10 || statuses[429] != 2 {
		t.Fatalf("statuses %v, want 10 × 200 then 2 × 429", statuses)
	}
	// The banner's export line works as printed: it reaches both servers.
	exports := regexp.MustCompile(`(?m)^\s+export\s+export (.*)$`).FindStringSubmatch(text)
	if exports == nil {
		t.Fatalf("no export line in the banner:\n%s", text)
	}
	env := map[string]string{}
	for _, kv := range strings.Fields(exports[1]) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, args := range [][]string{{"rules", "list"}, {"check", "client_id=erin"}} {
		var out, errOut strings.Builder
		if err := run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] }); err != nil || !strings.Contains(out.String(), "per-client") {
			t.Fatalf("sluice %s with the banner's exports: %v\n%s%s", strings.Join(args, " "), err, &out, &errOut)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("sluice dev after SIGINT: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("sluice dev did not stop on SIGINT")
	}
	// The services' passwords were in its environment, never in its output.
	for _, secret := range []string{"pg-secret-1", "redis-secret-2"} {
		if strings.Contains(printed.String(), secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("sluice dev printed the password %q", secret)
		}
	}
	if !strings.Contains(logs.String(), "no Redis") {
		t.Errorf("no log of the Redis fallback (the check above would see nothing):\n%s", logs.String())
	}
}

func postgresInstalled() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return p, nil
		}
		return "", os.ErrNotExist
	}
	return dirs[0], nil
}
