package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// runExport writes a tenant's tenant file (internal/tenantfile) to stdout
// or -o FILE.
func runExport(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write to this file (default stdout)")
	server := fs.String("server", flagenv.NewEnv(getenv).String("SLUICE_SERVER", defaultAddress), "control plane URL (env SLUICE_SERVER)")
	pos, err := parseArgs(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprint(stderr, "usage: sluice export [-o FILE] [-server URL] TENANT-SLUG\n")
		return errUsage
	}
	client, err := controlPlane(*server, getenv, stderr)
	if err != nil {
		return err
	}
	b, err := client.Export(ctx, pos[0])
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// runApply makes tenants match their tenant files: every file checked
// first, none sent if any is invalid or two name one tenant; then all
// applied in one transaction of the control plane (every tenant or none).
func runApply(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var paths listFlag
	fs.Var(&paths, "f", "a tenant file, or a directory of them (.yaml, .yml); repeatable; - for stdin")
	dryRun := fs.Bool("dry-run", false, "print what would change, change nothing")
	prune := fs.Bool("prune", false, "delete the tiers, rules and overrides a file does not name")
	asJSON := fs.Bool("json", false, "print JSON (with several files, an array)")
	server := fs.String("server", flagenv.NewEnv(getenv).String("SLUICE_SERVER", defaultAddress), "control plane URL (env SLUICE_SERVER)")
	if pos, err := parseArgs(fs, args); err != nil || len(paths) == 0 || len(pos) != 0 {
		fmt.Fprint(stderr, "usage: sluice apply -f FILE|DIR [-f …] [-dry-run] [-prune] [-json] [-server URL]\n")
		return errUsage
	}
	type tenantFile struct {
		name string
		data []byte
		file *tenantfile.File
	}
	var files []tenantFile
	names := []string{"-"}
	if len(paths) != 1 || paths[0] != "-" {
		var err error
		if names, err = yamlFiles(paths); err != nil {
			return err
		}
	}
	invalid := false
	tenants := map[string]string{}
	for _, name := range names {
		data, err := readInput(name, tenantfile.MaxBytes)
		if err != nil {
			return fmt.Errorf("%w: %w", errInput, err)
		}
		f, err := tenantfile.Parse(data)
		switch {
		case err != nil:
			reportInvalid(stderr, name, err)
			invalid = true
		case tenants[f.Tenant] != "":
			fmt.Fprintf(stderr, "%s: tenant %s is also %s's: one file per tenant\n", name, f.Tenant, tenants[f.Tenant])
			invalid = true
		default:
			tenants[f.Tenant] = name
			files = append(files, tenantFile{name, data, f})
		}
	}
	if invalid {
		return errInput
	}
	client, err := controlPlane(*server, getenv, stderr)
	if err != nil {
		return err
	}
	out := &emitter{w: stdout, json: *asJSON, n: len(files)}
	var results []tenantfile.ApplyResult
	if len(files) == 1 {
		res, err := client.Apply(ctx, &sluicev1.ApplyTenantFileRequest{Content: files[0].data, Prune: *prune, DryRun: *dryRun})
		if err != nil {
			return fmt.Errorf("%s (tenant %s): %w", files[0].name, files[0].file.Tenant, err)
		}
		results = append(results, res)
	} else {
		req := &sluicev1.ApplyTenantFilesRequest{Prune: *prune, DryRun: *dryRun}
		var sent []string
		for _, tf := range files {
			req.Files, sent = append(req.Files, tf.data), append(sent, tf.name)
		}
		var err error
		if results, err = client.ApplyAll(ctx, req); err != nil {
			return fmt.Errorf("%s%w", fileOf(err, sent), err)
		}
	}
	for i, res := range results {
		tf := files[i]
		err := out.emit(res, func(w io.Writer) {
			would := ""
			if res.DryRun {
				would = "would "
			}
			for _, c := range res.Changes {
				fmt.Fprintf(w, "%s%s\n", would, c)
			}
			if len(res.Changes) == 0 {
				fmt.Fprintf(w, "tenant %s: up to date\n", tf.file.Tenant)
			} else {
				fmt.Fprintf(w, "tenant %s: %d changes%s\n", tf.file.Tenant, len(res.Changes), map[bool]string{true: " (dry run: none made)"}[res.DryRun])
			}
			if res.Skipped != "" {
				fmt.Fprintf(w, "not applied: %s\n", res.Skipped)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fileIndex finds the file an ApplyTenantFiles error is of.
var fileIndex = regexp.MustCompile(`^files\[(\d+)\]`)

// fileOf names the file of files an ApplyTenantFiles error is of ("a.yaml:
// "), if it is of one.
func fileOf(err error, names []string) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	m := fileIndex.FindStringSubmatch(ce.Message())
	if m == nil {
		return ""
	}
	if i, _ := strconv.Atoi(m[1]); i < len(names) {
		return names[i] + ": "
	}
	return ""
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
