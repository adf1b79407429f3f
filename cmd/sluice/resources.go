package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/flagenv"
)

// errRejected marks a check that was rejected (exit code 4).
var errRejected = errors.New("rejected")

// session is what every resource command shares: the control plane, the
// key, the output form and the tenant acted in.
type session struct {
	ctx    context.Context
	server string
	key    string
	tenant string
	json   bool
	out    io.Writer
}

// call makes one authenticated call and prints its answer: JSON with
// -json, else human through text.
func call[Req, Res any](s *session, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, text func(*tabwriter.Writer, *Res)) error {
	_, err := callFor(s, f, msg, text)
	return err
}

// callFor is call that also returns the answer.
func callFor[Req, Res any](s *session, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, text func(*tabwriter.Writer, *Res)) (*Res, error) {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := f(s.ctx, req)
	if err != nil {
		return nil, err
	}
	if s.json {
		b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(any(res.Msg).(proto.Message))
		_, err := fmt.Fprintln(s.out, string(b))
		return res.Msg, err
	}
	tw := tabwriter.NewWriter(s.out, 2, 4, 2, ' ', 0)
	text(tw, res.Msg)
	return res.Msg, tw.Flush()
}

// resourceUsage lists the resource commands.
const resourceUsage = `usage:
  sluice tenants   list [-slug PREFIX] | get TENANT | create SLUG -name N [-default-tier T] [-shadow] | update TENANT [flags] | delete TENANT
  sluice tiers     list | create NAME | rename TIER -name N | delete TIER
  sluice rules     list [-tier T] | create -tier T -name N [-algorithm A] -limit N -window D [flags] | update RULE [flags] | delete RULE
  sluice overrides list [-identifier PREFIX] | create -identifier ID [-descriptor D] (-tier T | -rule R [-limit N] [-window D] [flags] | -block [-rule R]) [-for D] | update ID [flags] | delete ID
  sluice keys      list [-revoked] | create [-kind admin|viewer|check] [-name N] [-for D] | rotate [-grace D] ID | revoke ID
  sluice audit     list [-limit N] [-before ID] [-resource ID]   (who changed what, newest first)
  sluice deciders  list                                 (operator: the config version each decider enforces, and the latest)
  sluice reports   rejections [-step D] [-rule R] [-tier T] | top [-rule R] [-limit N] | breakdown [-by rule|tier] | csv REPORT
                   (each over -since D, 24h unless given, before -until T, now unless given; a viewer key is enough)
  sluice check     [-decider URL] [-tier T] [-cost N] [-peek] KEY=VALUE...   (SLUICE_CHECK_KEY: a check key)
  sluice reset     [-decider URL] [-tier T] KEY=VALUE...                     (SLUICE_CHECK_KEY: a check key)
common flags: -server URL (SLUICE_SERVER), -tenant ID|SLUG (with the operator key), -json
a tier (-tier) is given by name or id, a rule (-rule) by id, TIER/RULE, or its name where one tier has it; "sluice RESOURCE VERB -h" lists a command's flags
`

// verb is one resource command: the argument it takes after its flags
// ("" for none, else its name for the usage line) and its flags, defined
// on the command's own flag set so that its -h lists them alone and a
// flag of another command is refused. flags returns what runs once they
// are parsed, given the session, the client and the argument.
type verb struct {
	arg   string
	flags func(fs *flag.FlagSet) func(s *session, c *http.Client, arg string) error
}

// plain is a verb without flags of its own.
func plain(arg string, run func(s *session, c *http.Client, arg string) error) verb {
	return verb{arg, func(*flag.FlagSet) func(*session, *http.Client, string) error { return run }}
}

// verbNotes say more in a command's usage, where there is more to say.
var verbNotes = map[string]string{
	"tenants update":   "It changes what the flags given say and keeps the rest, as it finds them when it writes.",
	"rules update":     "It changes what the flags given say and keeps the rest, as it finds them when it writes\n(the defaults below are create's).",
	"overrides update": "It changes what the flags given say and keeps the rest, as it finds them when it writes,\nin one config version: the client is never without its override meanwhile. Parameters without\n-algorithm change the override's own (a burst following -limit unless -burst is given); with it,\nthe flags given are the parameters, whole.",
	"keys rotate":      "It makes a new key of the key's kind, name and expiry and prints its secret; the old key\nworks on through -grace (never past its own expiry), so its users can move to the new one.",
	"overrides create": "With -rule, parameters without -algorithm change the rule's (a burst following -limit\nunless -burst is given); with it, the flags given are the parameters, whole.",
	"reports csv":      "REPORT is rejections (over time), top (rejected clients), rules, tiers or regions (totals by\nrule, tier or region), written to standard output as CSV with a header row.",
}

// updated says what an update did to a resource read as before, written as
// after: "unchanged" when the flags left it as it was (the control plane
// then writes nothing), else "updated".
func updated(before, after proto.Message) string {
	if proto.Equal(before, after) {
		return "unchanged"
	}
	return "updated"
}

// edit runs a read-modify-write whose write carries the etag of its read,
// again while the write is refused because another change came between
// (Aborted), so that the change is applied to the latest state and overwrites
// none. It gives up after a few rounds of such contention.
func edit(readModifyWrite func() error) error {
	const rounds = 5
	var err error
	for range rounds {
		if err = readModifyWrite(); connect.CodeOf(err) != connect.CodeAborted {
			return err
		}
	}
	return fmt.Errorf("changed by others %d times while this change was being made; try again: %w", rounds, err)
}

// verbs are the resource commands, by "resource verb": each resource's
// file holds its own.
var verbs = joinVerbs(tenantVerbs, ruleVerbs, overrideVerbs, keyVerbs, auditVerbs, reportVerbs)

// joinVerbs is one map of sets, which name each verb once.
func joinVerbs(sets ...map[string]verb) map[string]verb {
	all := map[string]verb{}
	for _, set := range sets {
		for name, v := range set {
			if _, twice := all[name]; twice {
				panic("sluice: the verb " + name + " is defined twice") // a build mistake
			}
			all[name] = v
		}
	}
	return all
}

// usageError is a mistake in a command's arguments found after parsing
// them (an unknown algorithm, a malformed match): exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string      { return e.msg }
func (usageError) Is(target error) bool { return target == errUsage }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// runResource runs `sluice <resource> <verb> ...`.
func runResource(ctx context.Context, resource string, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	switch resource {
	case "check":
		return runCheck(ctx, args, stdout, stderr, getenv)
	case "reset":
		return runReset(ctx, args, stdout, stderr, getenv)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, resourceUsage)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, resourceUsage)
		return errUsage
	}
	v, ok := verbs[resource+" "+args[0]]
	if !ok {
		fmt.Fprintf(stderr, "unknown command %q\n%s", resource+" "+args[0], resourceUsage)
		return errUsage
	}
	name := "sluice " + resource + " " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimSpace("usage: "+name+" [flags] "+v.arg))
		if n := verbNotes[resource+" "+args[0]]; n != "" {
			fmt.Fprintln(fs.Output(), n)
		}
		fs.PrintDefaults()
	}
	s := &session{ctx: ctx, out: stdout, key: getenv("SLUICE_KEY")}
	fs.StringVar(&s.server, "server", flagenv.NewEnv(getenv).String("SLUICE_SERVER", defaultAddress), "control plane URL (env SLUICE_SERVER)")
	fs.StringVar(&s.tenant, "tenant", "", "tenant id or slug (required with the operator key)")
	fs.BoolVar(&s.json, "json", false, "print JSON")
	run := v.flags(fs)
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	want := 1 // the argument
	if v.arg == "" {
		want = 0
	}
	optional := strings.HasPrefix(v.arg, "[")
	if len(pos) != want && !(optional && len(pos) == 0) {
		if len(pos) > want {
			fmt.Fprintf(stderr, "unexpected argument %q: give the rest as flags\n", pos[want])
		} else {
			fmt.Fprintf(stderr, "missing the argument: %s\n", v.arg)
		}
		fs.Usage()
		return errUsage
	}
	if s.key == "" {
		fmt.Fprint(stderr, "set SLUICE_KEY to the operator key or a tenant admin key (reports: or a viewer key)\n")
		return errUsage
	}
	var arg string
	if len(pos) == 1 {
		arg = pos[0]
	}
	if s.tenant != "" {
		if s.tenant, err = tenantIDOf(s, http.DefaultClient, s.tenant); err != nil {
			return err
		}
	}
	if resource == "tenants" && arg != "" {
		if arg, err = tenantIDOf(s, http.DefaultClient, arg); err != nil {
			return err
		}
	}
	err = run(s, http.DefaultClient, arg)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, ue.msg)
	}
	return err
}
