// Command sluice is Sluice's command-line tool: `sluice dev` runs the whole
// system in one process; the other commands manage tenants, tiers, rules,
// overrides and keys through the control plane's API, import an
// envoyproxy/ratelimit config or the rate limiting plugins of a Kong one,
// export and apply tenant files (a tenant's configuration kept in Git),
// and ask a decider for decisions.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/flagenv"
)

const usage = `usage: sluice <command> [flags]

commands:
  dev      run the control plane, a decider and analytics in one process (what make dev runs);
           DATABASE_URL else local PostgreSQL, REDIS_URL else local Redis else in-process,
           KAFKA_BROKERS else an embedded broker, SLUICE_DEV_DIR keeps the dev keys and data
           (default: the user cache dir), SLUICE_DELTA_INTERVAL paces counter deltas (10s),
           SLUICE_DECISION_BUDGET bounds a decision's wait to be sent to Redis (50ms; then the overload policy answers),
           SLUICE_GRPC_ADDR the gRPC listener (Envoy RLS, DecisionService; 127.0.0.1:8089),
           SLUICE_RATE_LIMIT_HEADERS the headers answered (ietf, draft-6, x, none or kong; as the decider's)
  import   import envoyproxy/ratelimit YAML files, each a domain, into tenants: sluice import [-dry-run] [-prune] [-merge-domains] [-tier NAME] [-json] FILE|DIR...
           or the rate limiting plugins of a Kong declarative configuration: sluice import -kong [-tenant SLUG] … FILE
  export   write a tenant's tiers, rules and overrides as a tenant file: sluice export [-o FILE] SLUG
  apply    make tenants match their tenant files (created if missing): sluice apply -f FILE|DIR [-f …] [-dry-run] [-prune] [-json]
  demo     make sluice dev's demo tenant on a deployment and print its keys (SLUICE_KEY: the operator key)
  tenants, tiers, rules, overrides, keys, audit, deciders, reports
           list, create and delete (rules: update; keys: revoke; reports: rejections, top,
           breakdown, csv) through the control plane's API;
           "sluice rules" (or any of them) alone lists their commands, "sluice rules create -h" its flags
  check    ask a decider for a decision: sluice check [-peek] [-limit 100/1m] client_id=alice (SLUICE_CHECK_KEY)
  reset    reset the counters a request meets, on every decider: sluice reset client_id=alice (SLUICE_CHECK_KEY)
  bench    load a decider: sluice bench [-decider URL [-coalesce] | -grpc HOST:PORT [-raw] |
           -rls HOST:PORT -domain D [-raw] | -gubernator HOST:PORT [-raw]] [-c 50] [-keys 10000] [-n 100000]
           [-pid PID] [-redis HOST:PORT] (the CPU that server and that Redis take per decision)

environment:
  SLUICE_SERVER   control plane URL (default http://127.0.0.1:8080, sluice dev's)
  SLUICE_DECIDER  decider URL, for check, reset and bench (default http://127.0.0.1:8080, sluice dev's)
  SLUICE_KEY      the operator key, or a tenant admin key (reports: or a viewer key);
                  unset, with neither URL set: sluice dev's admin key (SLUICE_DEV_DIR)
  SLUICE_CHECK_KEY a check key, for check, reset and bench; unset likewise: sluice dev's
  SLUICE_KEY_FILE a file holding it instead (also SLUICE_CHECK_KEY_FILE)

exit codes: 0 done (check: allowed), 1 failed, 2 usage, 3 invalid input, 4 check rejected
`

// errUsage marks a command-line mistake (exit code 2), errInput an
// invalid input file (exit code 3).
var (
	errUsage = errors.New("usage")
	errInput = errors.New("invalid input")
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	getenv, err := flagenv.WithSecretFiles(os.Getenv)
	if err == nil {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr, getenv)
	}
	if err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		if errors.Is(err, errRejected) {
			os.Exit(4)
		}
		if code := exitCode(0); errors.As(err, &code) { // the command said why
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "sluice:", describe(err))
		if errors.Is(err, errInput) || connect.CodeOf(err) == connect.CodeInvalidArgument {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	if args[0] != "dev" {
		getenv = withDevKeys(getenv)
	}
	switch args[0] {
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr, getenv)
	case "import":
		return runImport(ctx, args[1:], stdout, stderr, getenv)
	case "apply":
		return runApply(ctx, args[1:], stdout, stderr, getenv)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr, getenv)
	case "export":
		return runExport(ctx, args[1:], stdout, stderr, getenv)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr, getenv)
	case "tenants", "tiers", "rules", "overrides", "keys", "audit", "deciders", "reports", "check", "reset":
		return runResource(ctx, args[0], args[1:], stdout, stderr, getenv)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return errUsage
}
