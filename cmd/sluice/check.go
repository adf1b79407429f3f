package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
)

// sluice check and sluice reset: calls to a decider's check API.

// runCheck asks a decider for a decision: exit 0 when allowed, 4 when
// rejected.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	var cost *int64
	var peek *bool
	var limit, lease *string
	var release *bool
	dc, err := parseDeciderCall(ctx, "check", "[-cost N] [-peek] [-limit N/WINDOW[/ALGORITHM]] [-lease NAME [-release]] ", args, stdout, stderr, getenv, func(fs *flag.FlagSet) {
		cost = fs.Int64("cost", 0, "cost units (default 1)")
		peek = fs.Bool("peek", false, "ask without consuming whether the request would be admitted")
		lease = fs.String("lease", "", "concurrency rules: the lease to take or renew (empty: a new one, which the answer names)")
		release = fs.Bool("release", false, "end the -lease named on the concurrency rules the request meets, in place of a check")
		limit = fs.String("limit", "", "decide by this limit alone, such as 100/1m (a fixed window) or 100/1m/token_bucket, in place of the tier's rules")
	})
	if err != nil {
		return err
	}
	if *release && *lease == "" {
		fmt.Fprintln(stderr, "-release needs the -lease to end")
		return errUsage
	}
	req := &sluicev1.CheckRequest{Tier: dc.tier, Cost: *cost, Peek: *peek, Descriptors: dc.descriptors, Lease: *lease, Release: *release}
	if *limit != "" {
		n, w, _ := strings.Cut(*limit, "/")
		w, a, named := strings.Cut(w, "/")
		requests, nerr := strconv.ParseInt(n, 10, 64)
		window, werr := days.ParseDuration(w)
		var alg policy.Algorithm
		var aerr error
		if named {
			alg, aerr = decide.ParseRequestLimitAlgorithm(a)
		}
		if nerr != nil || werr != nil || aerr != nil {
			fmt.Fprintf(stderr, "-limit %q: want requests/window[/algorithm], such as 100/1m or 100/1m/token_bucket\n", *limit)
			return errUsage
		}
		req.Limit = &sluicev1.RequestLimit{Requests: requests, Window: durationpb.New(window), Algorithm: sluicev1.Algorithm(alg)}
	}
	asJSON := dc.session.json
	dc.session.json = false // its JSON is the HTTP API's, below
	res, err := callFor(dc.session, dc.client.Check, req, func(w *tabwriter.Writer, r *sluicev1.CheckResponse) {
		if asJSON {
			return
		}
		if *release {
			fmt.Fprintf(w, "released lease %s\n", *lease)
			return
		}
		fmt.Fprintf(w, "%s\t(config version %d)\n", map[bool]string{true: "allowed", false: "rejected"}[r.Allowed], r.ConfigVersion)

		fmt.Fprintln(w, "RULE\tALLOWED\tLIMIT\tREMAINING\tRESET\tRETRY AFTER")
		for _, x := range r.Rules {
			fmt.Fprintf(w, "%s\t%v\t%d\t%d\t%s\t%s\n", x.GetRuleName(), x.GetAllowed(), x.GetLimit(), x.GetRemaining(), waitText(x.GetResetAfter().AsDuration()), waitText(x.GetRetryAfter().AsDuration()))
		}
		if r.Lease != "" {
			w.Flush() // a line of its own, outside the table's columns
			fmt.Fprintf(w, "lease %s: held until its TTL, or ended by sluice check -release -lease %s KEY=VALUE...\n", r.Lease, r.Lease)
		}
	})
	if err != nil {
		return err
	}
	if asJSON {
		if err := printCheckJSON(dc.session.out, res); err != nil {
			return err
		}
	}
	if !res.Allowed {
		return errRejected
	}
	return nil
}

// runReset runs `sluice reset`: the counters the request of the
// descriptors given meets are reset on every decider.
func runReset(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	dc, err := parseDeciderCall(ctx, "reset", "", args, stdout, stderr, getenv, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	_, err = callFor(dc.session, dc.client.Reset, &sluicev1.ResetRequest{Tier: dc.tier, Descriptors: dc.descriptors},
		func(w *tabwriter.Writer, r *sluicev1.ResetResponse) {
			if len(r.Rules) == 0 {
				fmt.Fprintln(w, "no rule applies: nothing to reset")
			}
			for _, x := range r.Rules {
				fmt.Fprintf(w, "reset %s\t(%s)\n", x.RuleName, x.RuleId)
			}
		})
	return err
}

// deciderCall is what the commands asking a decider share: the session
// (the check key), the decider's client, and the request's tier and
// KEY=VALUE descriptors.
type deciderCall struct {
	session     *session
	client      sluicev1connect.DecisionServiceClient
	tier        string
	descriptors []*sluicev1.Descriptor
}

// parseDeciderCall parses `sluice <name>`'s arguments: the flags every
// such command has, those more adds (shown in usage as moreUsage), and
// the descriptors.
func parseDeciderCall(ctx context.Context, name, moreUsage string, args []string, stdout, stderr io.Writer, getenv func(string) string, more func(*flag.FlagSet)) (*deciderCall, error) {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	decider := fs.String("decider", flagenv.NewEnv(getenv).String("SLUICE_DECIDER", defaultAddress), "decider URL (env SLUICE_DECIDER)")
	tier := fs.String("tier", "", "tier to apply")
	asJSON := fs.Bool("json", false, "print JSON")
	more(fs)
	descs, err := parseArgs(fs, args)
	if err != nil || len(descs) == 0 {
		fmt.Fprintf(stderr, "usage: sluice %s [-decider URL] [-tier T] %s[-json] KEY=VALUE...\n", name, moreUsage)
		return nil, errUsage
	}
	key := getenv("SLUICE_CHECK_KEY")
	if key == "" {
		fmt.Fprint(stderr, "set SLUICE_CHECK_KEY to a check key\n")
		return nil, errUsage
	}
	dc := &deciderCall{session: &session{ctx: ctx, key: key, json: *asJSON, out: stdout},
		client: sluicev1connect.NewDecisionServiceClient(http.DefaultClient, *decider), tier: *tier}
	for _, a := range descs {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "descriptor %q: want KEY=VALUE\n", a)
			return nil, errUsage
		}
		dc.descriptors = append(dc.descriptors, &sluicev1.Descriptor{Key: k, Value: v})
	}
	return dc, nil
}

// waitText is a reset or retry-after as people read it: to the millisecond
// ("1m37.62s"), "never" when negative.
func waitText(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d >= time.Minute:
		d = d.Round(time.Second) // 13m45s, not 13m44.722s
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	return days.Format(d)
}

// describe renders a failed call for people: what the command was doing
// (the wrapping of the call's error), the call's message, and each field
// of an InvalidArgument's BadRequest details.
func describe(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(err.Error(), ce.Error()))
	b.WriteString(strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + ce.Message())
	for _, d := range ce.Details() {
		v, err := d.Value()
		if br, ok := v.(*errdetails.BadRequest); ok && err == nil {
			for _, f := range br.FieldViolations {
				b.WriteString("\n  " + f.Field + ": " + f.Description)
			}
		}
	}
	if ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "connection refused") {
		b.WriteString("\n  nothing listens there: is it running? (SLUICE_SERVER names the control plane, SLUICE_DECIDER the decider)")
	}
	return b.String()
}

// printCheckJSON writes a check's answer as POST /v1/check answers it
// (docs/api.md, checkapi.CheckJSON): the same field names, waits in
// milliseconds.
func printCheckJSON(w io.Writer, r *sluicev1.CheckResponse) error {
	ms := func(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
	out := checkapi.CheckJSON{Allowed: r.Allowed, Rules: []httpport.RuleJSON{}, ConfigVersion: r.ConfigVersion, Lease: r.Lease, Degraded: r.Degraded}
	for _, x := range r.Rules {
		j := httpport.RuleJSON{Rule: x.RuleName, Allowed: x.Allowed, Shadow: x.Shadow, Limit: x.Limit, Remaining: x.Remaining,
			ResetAfterMS: ms(x.GetResetAfter().AsDuration()), DelayMS: ms(x.GetDelay().AsDuration()), Message: x.Message, Unenforced: x.Unenforced}
		if x.RetryAfter != nil {
			v := ms(x.RetryAfter.AsDuration())
			j.RetryAfterMS = &v
		}
		out.Rules = append(out.Rules, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
