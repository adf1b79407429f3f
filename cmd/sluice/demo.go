package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// demoTenant is the demo tenant sluice dev seeds, as a tenant file. Its
// rules fail open, as a demo without Redis should.
const demoTenant = `tenant: demo
name: Demo
default_tier: free
tiers:
  - name: free
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 10
        window: 1m
        failure_mode: open
      - name: login
        match: {route: /login}
        key_by: [client_id]
        algorithm: sliding_window
        limit: 5
        window: 1m
        failure_mode: open
  - name: pro
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 100
        window: 1m
        failure_mode: open
`

// runDemo makes, through the control plane's API, the demo tenant sluice
// dev seeds, and prints its admin, check and viewer keys, for a
// deployment (docker compose) to try as sluice dev is tried. A demo
// tenant that exists is left as it is: its keys were printed when it was
// made.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(stderr, "usage: sluice demo (SLUICE_SERVER, and SLUICE_KEY the operator key)\n")
		return errUsage
	}
	if err := run(ctx, []string{"tenants", "get", "demo"}, io.Discard, io.Discard, getenv); err == nil {
		fmt.Fprintln(stdout, "the demo tenant exists; keys for it: sluice keys create -tenant demo -kind check")
		return nil
	}
	dir, err := os.MkdirTemp("", "sluice-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(file, []byte(demoTenant), 0o600); err != nil {
		return err
	}
	if err := run(ctx, []string{"apply", "-f", file}, stdout, stderr, getenv); err != nil {
		return fmt.Errorf("the demo tenant: %w", err)
	}
	var errs []error
	for _, kind := range []string{"admin", "check", "viewer"} {
		errs = append(errs, run(ctx, []string{"keys", "create", "-tenant", "demo", "-kind", kind, "-name", "demo " + kind}, stdout, stderr, getenv))
	}
	return errors.Join(errs...)
}
