package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// runExport writes a tenant's tenant file (internal/tenantfile) to stdout
// or -o FILE.
func runExport(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write to this file (default stdout)")
	server := fs.String("server", flagenv.Env(getenv).String("SLUICE_SERVER", "http://127.0.0.1:8081"), "control plane URL (env SLUICE_SERVER)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprint(stderr, "usage: sluice export [-o FILE] [-server URL] TENANT-SLUG\n")
		return errUsage
	}
	client, err := controlPlane(*server, getenv, stderr)
	if err != nil {
		return err
	}
	b, err := client.Export(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// runApply makes a tenant match a tenant file.
func runApply(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "the tenant file (- for stdin)")
	dryRun := fs.Bool("dry-run", false, "print what would change, change nothing")
	prune := fs.Bool("prune", false, "delete the tiers, rules and overrides the file does not name")
	asJSON := fs.Bool("json", false, "print JSON")
	server := fs.String("server", flagenv.Env(getenv).String("SLUICE_SERVER", "http://127.0.0.1:8081"), "control plane URL (env SLUICE_SERVER)")
	if err := fs.Parse(args); err != nil || *file == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, "usage: sluice apply -f FILE [-dry-run] [-prune] [-json] [-server URL]\n")
		return errUsage
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, tenantfile.MaxBytes+1))
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	f, err := tenantfile.Parse(data)
	if err != nil {
		var pe *policy.Error
		if errors.As(err, &pe) {
			fmt.Fprintf(stderr, "%s: %s\n", *file, pe.Message)
			for _, fe := range pe.Fields {
				fmt.Fprintf(stderr, "  %s: %s\n", fe.Field, fe.Description)
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", *file, err)
		}
		return errInput
	}
	client, err := controlPlane(*server, getenv, stderr)
	if err != nil {
		return err
	}
	res, err := client.Apply(ctx, &sluicev1.ApplyTenantFileRequest{Content: data, Prune: *prune, DryRun: *dryRun})
	if err != nil {
		return err
	}
	return printResult(stdout, *asJSON, res, func(w io.Writer) {
		would := ""
		if res.DryRun {
			would = "would "
		}
		for _, c := range res.Changes {
			fmt.Fprintf(w, "%s%s\n", would, c)
		}
		if len(res.Changes) == 0 {
			fmt.Fprintf(w, "tenant %s: up to date\n", f.Tenant)
		} else {
			fmt.Fprintf(w, "tenant %s: %d changes%s\n", f.Tenant, len(res.Changes), map[bool]string{true: " (dry run: none made)"}[res.DryRun])
		}
		if res.Skipped != "" {
			fmt.Fprintf(w, "not applied: %s\n", res.Skipped)
		}
	})
}

// controlPlane returns a client of the control plane at server with
// SLUICE_KEY, or a usage error when the key is not set.
func controlPlane(server string, getenv func(string) string, stderr io.Writer) (*cli.Client, error) {
	key := getenv("SLUICE_KEY")
	if key == "" {
		fmt.Fprint(stderr, "set SLUICE_KEY to the operator key or a tenant admin key\n")
		return nil, errUsage
	}
	return cli.NewClient(http.DefaultClient, server, key), nil
}
