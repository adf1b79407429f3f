package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kongimport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "print what the import would change, change nothing (without SLUICE_KEY: the rules each file holds)")
	prune := fs.Bool("prune", false, "delete the tier's rules the file does not name")
	tier := fs.String("tier", "default", "the tier to import into (a tenant the import creates gets it as its default tier; Envoy's requests name no tier, so they meet the tenant's default)")
	asJSON := fs.Bool("json", false, "print JSON (with several files, an array)")
	merge := fs.Bool("merge-domains", false, "files of one domain make its tenant together, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG (a limit in two of them is an error); otherwise one file per domain")
	kong := fs.Bool("kong", false, "the files are a Kong declarative configuration (decK, one file or several as deck gateway sync takes them; a directory stands for its .yaml, .yml and .json files): its rate-limiting and rate-limiting-advanced plugins become rules (docs/migrating.md)")
	tenant := fs.String("tenant", "", "with -kong: the tenant's slug (default: the file's _workspace; with an admin key, its own tenant)")
	server := fs.String("server", flagenv.NewEnv(getenv).String("SLUICE_SERVER", defaultAddress), "control plane URL (env SLUICE_SERVER)")
	files, err := parseArgs(fs, args)
	if err != nil || len(files) == 0 {
		fmt.Fprint(stderr, "usage: sluice import [-dry-run] [-prune] [-merge-domains] [-tier NAME] [-json] [-server URL] FILE|DIR...\n"+
			"       sluice import -kong [-tenant SLUG] [-dry-run] [-prune] [-tier NAME] [-json] [-server URL] FILE|DIR...\n"+
			"(FILE - reads standard input: deck gateway dump -o - | sluice import -kong -tenant shop -)\n")
		return errUsage
	}
	// Each file is checked here, every problem printed with its file's
	// name; the control plane reads them again.
	var jobs []importJob
	format := sluicev1.ImportFormat_IMPORT_FORMAT_ENVOY
	if *kong {
		format = sluicev1.ImportFormat_IMPORT_FORMAT_KONG
		jobs, err = parseKong(files, *tenant, stderr)
	} else {
		jobs, err = parseImports(files, *merge, stderr)
	}
	if err != nil {
		return err
	}
	// With several files, JSON is an array of what each printed alone.
	out := &emitter{w: stdout, json: *asJSON, n: len(jobs)}
	if *dryRun && getenv("SLUICE_KEY") == "" { // no control plane to ask: the files alone
		for _, job := range jobs {
			job.plan.Tenant.DefaultTier = *tier
			if err := out.emit(planJSON(job.plan), func(w io.Writer) { printPlan(w, job.plan) }); err != nil {
				return err
			}
		}
		return nil
	}
	client, err := controlPlane(*server, getenv, stderr)
	if err != nil {
		return err
	}
	for _, job := range jobs {
		sum, err := client.Import(ctx, &sluicev1.ImportConfigRequest{Format: format, Contents: job.contents, Tenant: *tenant, Tier: *tier,
			Prune: *prune, DryRun: *dryRun})
		if err != nil {
			if *kong {
				return err
			}
			return fmt.Errorf("domain %s: %w", job.plan.Tenant.Name, err)
		}
		if !*kong && job.plan.Tenant.Name != sum.Tenant { // a domain that is no slug as it is: say which tenant it became
			sum.Notes = append([]string{fmt.Sprintf("domain %s is tenant %s (a slug has '-' where a domain has '_'); -tenant takes either", job.plan.Tenant.Name, sum.Tenant)}, sum.Notes...)
		}
		if err := out.emit(sum, func(w io.Writer) { printImported(w, sum) }); err != nil {
			return err
		}
	}
	return nil
}

// importJob is one import: the plan, and the files it is read from.
type importJob struct {
	plan     *envoyimport.Plan
	contents [][]byte
}

// parseImports reads the envoyproxy/ratelimit configurations of paths, a
// directory standing for its .yaml and .yml files (as envoyproxy/ratelimit
// loads its config directory), and refuses them all, printing every
// problem, when any is invalid or two have the same domain — unless merge,
// where the files of a domain make one plan (a limit in two of them is a
// problem then).
func parseImports(paths []string, merge bool, stderr io.Writer) ([]importJob, error) {
	files := []string{"-"}
	if len(paths) != 1 || paths[0] != "-" {
		var err error
		if files, err = yamlFiles(paths); err != nil {
			return nil, err
		}
	}
	var jobs []importJob
	domains := map[string]string{} // slug: the domain's first file
	bySlug := map[string]int{}     // slug: the domain's job
	invalid := false
	for _, name := range files {
		content, err := readInput(name, envoyimport.MaxBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errInput, err)
		}
		plan, err := envoyimport.Parse(bytes.NewReader(content))
		first := ""
		if err == nil {
			first = domains[plan.Tenant.Slug]
		}
		switch {
		case policy.ErrorCode(err) != policy.CodeUnknown:
			reportInvalid(stderr, name, err)
			invalid = true
		case err != nil:
			return nil, err
		case first != "" && !merge:
			fmt.Fprintf(stderr, "%s: domain %s is also %s's: one file per domain (or -merge-domains)\n", name, plan.Tenant.Name, first)
			invalid = true
		case first != "":
			job := &jobs[bySlug[plan.Tenant.Slug]]
			if err := job.plan.Merge(plan); err != nil {
				reportInvalid(stderr, name+" (merged with "+first+")", err)
				invalid = true
			}
			job.contents = append(job.contents, content)
		default:
			domains[plan.Tenant.Slug] = name
			bySlug[plan.Tenant.Slug] = len(jobs)
			jobs = append(jobs, importJob{plan: plan, contents: [][]byte{content}})
		}
	}
	if invalid {
		return nil, errInput
	}
	return jobs, nil
}

// parseKong reads the Kong declarative configuration in paths, a
// directory standing for its .yaml, .yml and .json files (as deck does).
// With several files, a problem is printed with its file's name.
func parseKong(paths []string, tenant string, stderr io.Writer) ([]importJob, error) {
	files := []string{"-"}
	if len(paths) != 1 || paths[0] != "-" {
		var err error
		if files, err = yamlFiles(paths, ".json"); err != nil {
			return nil, err
		}
	}
	var contents [][]byte
	for _, name := range files {
		content, err := readInput(name, kongimport.MaxBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errInput, err)
		}
		contents = append(contents, content)
	}
	plan, err := kongimport.ParseFiles(contents, tenant)
	var pe *policy.Error
	switch {
	case errors.As(err, &pe) && len(files) > 1:
		// contents[1].plugins[0] is b.yaml's plugins[0]
		named := *pe
		named.Fields = nil
		for _, fe := range pe.Fields {
			var i int
			if n, _ := fmt.Sscanf(fe.Field, "contents[%d]", &i); n == 1 && i < len(files) {
				_, rest, _ := strings.Cut(fe.Field, "]")
				fe.Field = files[i] + ": " + strings.TrimPrefix(rest, ".")
			}
			named.Fields = append(named.Fields, fe)
		}
		reportInvalid(stderr, strings.Join(files, ", "), &named)
		return nil, errInput
	case policy.ErrorCode(err) != policy.CodeUnknown:
		reportInvalid(stderr, files[0], err)
		return nil, errInput
	case err != nil:
		return nil, err
	}
	return []importJob{{plan: plan, contents: contents}}, nil
}

// importPlan is what an import without a control plane prints as JSON:
// the rules as a tenant file writes them.
type importPlan struct {
	Tenant         string            `json:"tenant"`
	Tier           string            `json:"tier"`
	Rules          []tenantfile.Rule `json:"rules"`
	UnlimitedPaths []string          `json:"unlimited_paths"`
	Notes          []string          `json:"notes,omitempty"`
}

func planJSON(plan *envoyimport.Plan) importPlan {
	out := importPlan{Tenant: plan.Tenant.Slug, Tier: plan.Tenant.DefaultTier, Rules: []tenantfile.Rule{}, UnlimitedPaths: plan.Unlimited, Notes: plan.Notes}
	for _, r := range plan.Rules {
		out.Rules = append(out.Rules, tenantfile.RuleFrom(r))
	}
	if out.UnlimitedPaths == nil {
		out.UnlimitedPaths = []string{}
	}
	return out
}

func printPlan(w io.Writer, plan *envoyimport.Plan) {
	fmt.Fprintf(w, "tenant %s, tier %s\n", plan.Tenant.Slug, plan.Tenant.DefaultTier)
	for _, r := range plan.Rules {
		what := fmt.Sprintf("%s %d per %s", r.Algorithm, r.Limit, windowOf(r.Params))
		if r.Block {
			what = "blocks every request"
		}
		fmt.Fprintf(w, "  rule %-40s %s, key by %v, shadow %v", r.Name, what, r.KeyBy, r.Shadow)
		if len(r.Match) > 0 && !r.Exact { // an exact rule's name is its match
			var m []string
			for _, c := range r.Match {
				m = append(m, c.Key+"="+c.Value)
			}
			fmt.Fprintf(w, ", on %s", strings.Join(m, " "))
		}
		if len(r.Replaces) > 0 {
			fmt.Fprintf(w, ", replaces %s", strings.Join(r.Replaces, " "))
		}
		if r.Quota {
			fmt.Fprint(w, ", a quota")
		}
		if !r.Enabled {
			fmt.Fprint(w, ", disabled")
		}
		fmt.Fprintln(w)
	}
	for _, u := range plan.Unlimited {
		fmt.Fprintf(w, "  unlimited %s (a shadow rule: never rejects)\n", u)
	}
	printNotes(w, plan.Notes)
}

// windowOf is a rule's window as people read it: a duration, or a
// calendar unit.
func windowOf(p policy.Params) string {
	if p.Calendar != policy.CalendarNone {
		return p.Calendar.String()
	}
	return days.Format(p.Window)
}

func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func printImported(w io.Writer, sum cli.ImportSummary) {
	if sum.DryRun {
		if sum.TenantCreated {
			fmt.Fprintf(w, "would create tenant %s\n", sum.Tenant)
		}
		fmt.Fprintf(w, "tenant %s, tier %s: %d rules to create %v, %d to update %v, %d unchanged, %d to delete %v (dry run: none made)\n", sum.Tenant, sum.Tier,
			len(sum.Created), sum.Created, len(sum.Updated), sum.Updated, len(sum.Unchanged), len(sum.Deleted), sum.Deleted)
	} else {
		if sum.TenantCreated {
			fmt.Fprintf(w, "created tenant %s (%s)\n", sum.Tenant, sum.TenantID)
		}
		fmt.Fprintf(w, "tenant %s, tier %s: %d rules created, %d updated, %d unchanged, %d deleted\n", sum.Tenant, sum.Tier,
			len(sum.Created), len(sum.Updated), len(sum.Unchanged), len(sum.Deleted))
	}
	for _, u := range sum.UnlimitedPaths {
		fmt.Fprintf(w, "unlimited %s: a shadow rule, never rejects\n", u)
	}
	printNotes(w, sum.Notes)
}

// printResult writes v as JSON, or text through human.
func printResult(w io.Writer, asJSON bool, v any, human func(io.Writer)) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(w)
	return nil
}
