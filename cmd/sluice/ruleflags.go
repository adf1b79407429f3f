package main

import (
	"cmp"
	"flag"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/flagenv"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

// ruleOpts are the flags that make or change a rule: rules create and
// rules update define them all; apply sets on a rule those given on the
// command line (create starts from a token bucket keyed by client_id,
// enabled; update from the rule as it stands).
type ruleOpts struct {
	params                                         paramOpts
	name, keyBy, match, replaces, failure, message *string
	scope                                          *string // region or global
	partitionBy, partitions                        *string
	shadow, enabled, exact, block, quota           *bool
	sync                                           *time.Duration
}

func defineRuleOpts(fs *flag.FlagSet) ruleOpts {
	return ruleOpts{
		params:      defineParamOpts(fs),
		name:        fs.String("name", "", "the rule's name, unique in its tier"),
		keyBy:       fs.String("key-by", "client_id", "comma-separated descriptors keying the counter (empty: one counter for the tenant)"),
		match:       fs.String("match", "", "comma-separated key=value descriptors a request must carry (value * for any; * within a value any run of characters: /api/*, *@example.com; a key given twice: either value)"),
		replaces:    fs.String("replaces", "", "comma-separated names of rules this one replaces where it applies"),
		failure:     fs.String("failure-mode", "local", "when Redis is unreachable: local (count on each decider), open (allow) or closed (reject)"),
		shadow:      fs.Bool("shadow", false, "report, never reject"),
		enabled:     fs.Bool("enabled", true, "enforce the rule (-enabled=false: keep it, enforce nothing)"),
		exact:       fs.Bool("exact", false, "envoyproxy/ratelimit's lookup: only requests with exactly the -match keys; the most specific exact rule wins"),
		scope:       fs.String("scope", "region", "where the limit holds: region (in each region on its own) or global (once across regions; fixed_window, sliding_window, gcra, token_bucket without warm-up)"),
		quota:       fs.Bool("quota", false, "envoyproxy/ratelimit's quota_mode: on Envoy's rate limit service, a call is rejected only when all its quota descriptors are over"),
		block:       fs.Bool("block", false, "reject every request the rule applies to, counting nothing (a blocklist entry)"),
		sync:        days.Flag(fs, "sync", 0, "count the rule on each decider, reconciling with Redis this often (e.g. 100ms; 0: strict)"),
		message:     fs.String("message", "", "what a client the rule rejects is told (one line, at most 512 bytes; empty: a generic one)"),
		partitionBy: fs.String("partition-by", "", "adaptive_concurrency: the descriptor whose values share the limit, e.g. plan or customer"),
		partitions:  fs.String("partitions", "", "adaptive_concurrency: value=share pairs, comma-separated, e.g. gold=0.6,free=0.3 (other values share the rest)"),
	}
}

// apply sets on r what the command line gives.
func (f ruleOpts) apply(fs *flag.FlagSet, r *sluicev1.Rule) error {
	if r.Params == nil {
		r.Params = &sluicev1.LimitParams{}
	}
	if err := f.params.apply(fs, r.Params); err != nil {
		return err
	}
	var err error // the first flag's that is wrong
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name":
			r.Name = *f.name
		case "key-by":
			r.KeyBy = flagenv.List(*f.keyBy)
		case "match":
			m, e := parsePairs(*f.match)
			err = cmp.Or(err, e)
			r.Match = m
		case "replaces":
			r.Replaces = flagenv.List(*f.replaces)
		case "message":
			r.Message = *f.message
		case "failure-mode":
			v, e := enumFlag(sluicev1.FailureMode_value, "FAILURE_MODE_", fl)
			err = cmp.Or(err, e)
			r.FailureMode = sluicev1.FailureMode(v)
		case "shadow":
			r.Shadow = *f.shadow
		case "enabled":
			r.Enabled = *f.enabled
		case "exact":
			r.Exact = *f.exact
		case "block":
			r.Block = *f.block
		case "quota":
			r.Quota = *f.quota
		case "partition-by":
			r.PartitionBy = *f.partitionBy
		case "partitions":
			p, e := parseShares(*f.partitions)
			err = cmp.Or(err, e)
			r.Partitions = p
		case "scope":
			v, e := enumFlag(sluicev1.Scope_value, "SCOPE_", fl)
			err = cmp.Or(err, e)
			r.Scope = sluicev1.Scope(v)
		case "sync":
			r.Sync = nil
			if *f.sync != 0 {
				r.Sync = durationpb.New(*f.sync)
			}
		}
	})
	return err
}

// enumFlag is the value of the protobuf enum (its names and their
// prefix) that fl names in lower case, or a usage error quoting fl's
// usage, which lists the choices.
func enumFlag(names map[string]int32, prefix string, fl *flag.Flag) (int32, error) {
	v, ok := names[prefix+strings.ToUpper(fl.Value.String())]
	if !ok {
		return 0, usageErrorf("-%s %q: %s", fl.Name, fl.Value.String(), fl.Usage)
	}
	return v, nil
}

// isSet reports whether the command line gives the flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// paramOpts are the flags of an algorithm and its parameters, for rules
// and for overrides that replace a rule's limit.
type paramOpts struct {
	algorithm, calendar, timeZone, adaptation       *string
	limit, burst, floor                             *int64
	window, warmUp, maxDelay, granularity, leaseTTL *time.Duration
	coldFactor                                      *float64
}

func defineParamOpts(fs *flag.FlagSet) paramOpts {
	return paramOpts{
		algorithm:   fs.String("algorithm", "token_bucket", policy.AlgorithmNames),
		limit:       fs.Int64("limit", 0, "requests per window"),
		burst:       fs.Int64("burst", 0, "token bucket and GCRA: capacity (0: the limit)"),
		window:      days.Flag(fs, "window", 0, "window, e.g. 1m"),
		calendar:    fs.String("calendar", "", "fixed window: calendar windows in place of -window: day, week (from Monday), month or year (none: the window)"),
		timeZone:    fs.String("time-zone", "", "with -calendar: the IANA time zone whose midnights start the windows, e.g. America/New_York (empty: UTC)"),
		warmUp:      days.Flag(fs, "warm-up", 0, "token bucket: ramp from a cold rate to the full rate over this long"),
		coldFactor:  fs.Float64("cold-factor", 0, "token bucket with -warm-up: how many times slower the cold rate is (default 3)"),
		maxDelay:    days.Flag(fs, "max-delay", 0, "leaky bucket: the longest a request may wait in the queue"),
		granularity: days.Flag(fs, "granularity", 0, "sliding buckets: the width of a bucket"),
		leaseTTL:    days.Flag(fs, "lease-ttl", 0, "concurrency, adaptive_concurrency: how long a lease lasts unless released"),
		floor:       fs.Int64("floor", 0, "adaptive_concurrency: the least the limit falls to (0: 1); -limit is the most"),
		adaptation:  fs.String("adaptation", "gradient", "adaptive_concurrency: how the limit is computed, gradient or aimd"),
	}
}

// apply sets on p what the command line gives.
func (f paramOpts) apply(fs *flag.FlagSet, p *sluicev1.LimitParams) error {
	dur := func(d time.Duration) *durationpb.Duration {
		if d == 0 {
			return nil
		}
		return durationpb.New(d)
	}
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "algorithm":
			v, e := enumFlag(sluicev1.Algorithm_value, "ALGORITHM_", fl)
			err = cmp.Or(err, e)
			p.Algorithm = sluicev1.Algorithm(v)
		case "limit":
			p.Limit = *f.limit
		case "burst":
			p.Burst = *f.burst
		case "window":
			p.Window = durationpb.New(*f.window)
		case "calendar":
			var v int32
			if *f.calendar != "" && *f.calendar != "none" {
				var e error
				v, e = enumFlag(sluicev1.Calendar_value, "CALENDAR_", fl)
				err = cmp.Or(err, e)
			}
			p.Calendar = sluicev1.Calendar(v)
			if p.Calendar != sluicev1.Calendar_CALENDAR_UNSPECIFIED && !isSet(fs, "window") {
				p.Window = nil // the calendar's, when an update turns a window into one
			}
			if p.Calendar == sluicev1.Calendar_CALENDAR_UNSPECIFIED && !isSet(fs, "time-zone") {
				p.TimeZone = "" // a window has no zone
			}
		case "time-zone":
			p.TimeZone = *f.timeZone
		case "warm-up":
			p.WarmUp = dur(*f.warmUp)
		case "cold-factor":
			p.ColdFactor = *f.coldFactor
		case "max-delay":
			p.MaxDelay = dur(*f.maxDelay)
		case "granularity":
			p.Granularity = dur(*f.granularity)
		case "lease-ttl":
			p.LeaseTtl = dur(*f.leaseTTL)
		case "floor":
			p.Floor = *f.floor
		case "adaptation":
			v, e := enumFlag(sluicev1.Adaptation_value, "ADAPTATION_", fl)
			err = cmp.Or(err, e)
			p.Adaptation = sluicev1.Adaptation(v)
		}
	})
	return err
}

// parseShares reads -partitions: value=share pairs.
func parseShares(s string) ([]*sluicev1.Partition, error) {
	var out []*sluicev1.Partition
	for _, p := range flagenv.List(s) {
		v, share, ok := strings.Cut(p, "=")
		f, err := strconv.ParseFloat(share, 64)
		if !ok || err != nil {
			return nil, usageErrorf("-partitions %q: want VALUE=SHARE, such as gold=0.6", p)
		}
		out = append(out, &sluicev1.Partition{Value: v, Share: f})
	}
	return out, nil
}
