package redisengine

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// A call's keys and arguments, as the scripts read them, and their
// answers decoded.

// A rule's arguments that depend only on its limiter are formatted once
// per limiter (see statics): a decision allocates little beyond its slices.
//
// The most common call, one request a flat script decides, has its keys
// and arguments in into when given (the call that will carry them: one
// allocation for both), else in one allocation of their own.
func (e *Engine) prepare(op string, reqs []limit.Request, now string, into *call) (*redis.Script, []string, []any, error) {
	nowArg := any(now)
	if now == "" {
		nowArg = redisTime
	}
	if op == "check" && len(reqs) == 1 && reqs[0].Spent == 0 { // the flat scripts know no Spent
		rq := reqs[0]
		if st := e.statics.get(rq.Limiter); st.single != nil { // a limiter a flat script decides
			sc := into
			if sc == nil {
				sc = &call{}
			}
			args := sc.argArr[:0]
			if flatArgs+len(st.single) > len(sc.argArr) {
				args = make([]any, 0, flatArgs+len(st.single))
			}
			sc.keyArr[0] = e.cfg.Prefix + rq.Key
			args = append(args, nowArg, e.minTTL, rq.Cost, firstGroup)
			return st.singleScript, sc.keyArr[:], append(args, st.single...), nil
		}
	}
	keys := make([]string, len(reqs))
	if op == "check" && len(reqs) > 1 && !spends(reqs) {
		if args, ok := e.multiArgs(reqs, nowArg); ok {
			for i, rq := range reqs {
				keys[i] = e.cfg.Prefix + rq.Key
			}
			return multi, keys, args, nil
		}
	}
	args := make([]any, 0, 4+21*len(reqs))
	args = append(args, nowArg, e.slack, e.minTTL, op)
	for i, rq := range reqs {
		if rq.Lease < 0 || rq.Lease >= maxLease {
			return nil, nil, nil, fmt.Errorf("redisengine: lease %d outside [0, 2^53)", rq.Lease)
		}
		keys[i] = e.cfg.Prefix + rq.Key
		st := e.statics.get(rq.Limiter)
		args = append(args, st.algorithm, rq.Cost, rq.Lease, flag(rq.Shadow))
		g := len(args)
		args = append(appendGeneral(args, st, now), rq.Spent)
		if rq.Partition != nil {
			args[g+partitionAt] = rq.Partition.Arg
		}
	}
	return script, keys, args, nil
}

// spends reports whether a request of reqs counts what other regions
// spent (limit.Request.Spent): decide.lua decides it.
func spends(reqs []limit.Request) bool {
	for _, rq := range reqs {
		if rq.Spent != 0 {
			return true
		}
	}
	return false
}

// redisTime is the "now" argument that makes a script read Redis TIME.
var redisTime any = ""

// flatArgs is how many of a flat script's arguments (flat.lua) come before
// the parameter group of a call of one key: now, minimum TTL, the key's
// cost and its group. flatReply is the length of their reply per key.
const flatArgs, flatReply = 4, 5

// multiArgs returns the arguments of multi.lua for the decision reqs:
// false when a rule is of neither of its families, or two share a key
// (multi.lua reads each rule's state before writing any).
func (e *Engine) multiArgs(reqs []limit.Request, now any) ([]any, bool) {
	var stBuf [4]*limiterArgs
	sts := stBuf[:0]
	for i, rq := range reqs {
		st := e.statics.get(rq.Limiter)
		if st.multi == nil {
			return nil, false
		}
		for _, other := range reqs[:i] {
			if other.Key == rq.Key {
				return nil, false
			}
		}
		sts = append(sts, st)
	}
	// A group per rule: a merged call (see wires) keeps one of each.
	args := make([]any, 0, 3+multiGroup*len(reqs)+1+2*len(reqs))
	args = append(args, now, e.minTTL, len(reqs))
	for _, st := range sts {
		args = append(args, st.multi...)
	}
	args = append(args, len(reqs))
	for i, rq := range reqs {
		g := i + 1
		if rq.Shadow {
			g = -g
		}
		args = append(args, rq.Cost, g)
	}
	return args, true
}

// multiGroup is how many fields a parameter group of multi.lua has.
const multiGroup = 7

// firstGroup is the group argument of a flat script's one key.
var firstGroup any = 1

// decode reads the reply of sc to reqs into res and says whether the
// decision admitted them.
func (e *Engine) decode(sc *redis.Script, reqs []limit.Request, reply []int64, res []limit.Result) (bool, error) {
	if sc == script {
		return decode(reply, len(reqs), res)
	}
	// multi.lua's reply opens with the decision; a flat script's one rule
	// decides alone, unless it is a shadow rule.
	n := flatReply * len(reqs)
	if sc == multi {
		n++
	}
	if len(reply) != n || sc != multi && len(reqs) != 1 {
		return false, fmt.Errorf("redisengine: reply of %d values for %d rules", len(reply), len(reqs))
	}
	admitted := reply[0] == 1 || reqs[0].Shadow
	if sc == multi {
		admitted, reply = reply[0] == 1, reply[1:]
	}
	for i, rq := range reqs {
		v := reply[flatReply*i:]
		r := limit.Result{Allowed: v[0] == 1, Limit: e.statics.get(rq.Limiter).shown, Remaining: v[1],
			ResetAfter: us(v[2]), RetryAfter: us(v[3]), Delay: us(v[4])}
		if v[3] < 0 {
			r.RetryAfter = limit.Never
		}
		res[i] = r
	}
	return admitted, nil
}

// decode reads decide.lua's reply for n rules into res.
func decode(reply []int64, n int, res []limit.Result) (bool, error) {
	if len(reply) != 1+6*n {
		return false, fmt.Errorf("redisengine: reply of %d values for %d rules", len(reply), n)
	}
	for i := range n {
		v := reply[1+6*i:]
		r := limit.Result{Allowed: v[0] == 1, Limit: v[1], Remaining: v[2],
			ResetAfter: us(v[3]), RetryAfter: us(v[4]), Delay: us(v[5])}
		if v[4] < 0 {
			r.RetryAfter = limit.Never
		}
		res[i] = r
	}
	return reply[0] == 1, nil
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// limiterArgs are the arguments of a limiter's rule that depend only on
// the limiter, formatted once. Floats are sent in their shortest exact
// form, so Lua parses the same doubles.
type limiterArgs struct {
	algorithm any
	// general are decide.lua's fields from capacity on; single are the
	// fields from capacity on of singleScript, the flat script that decides
	// the limiter's rule alone (nil when none does).
	general, single []any
	singleScript    *redis.Script
	multi           []any // the limiter's parameter group in multi.lua (nil: none)
	shown           int64 // the limit answers show
	// family is the limiter's sync.lua family when it can be counted
	// locally (see local.go), else -1; param is its sync.lua parameter.
	family   int
	param    any
	interval float64 // µs per unit, for the meters
	window   int64   // µs, for the fixed window
	// calendar and zone are a calendar window's (CalendarNone: none);
	// edges its last edges (limit.CalendarEdges), reused while the
	// decider's clock stays in their middle window.
	calendar policy.Calendar
	zone     *time.Location
	edges    atomic.Pointer[[4]int64]
}

func newLimiterArgs(l *limit.Limiter) *limiterArgs {
	c := l.Constants()
	window := c.Window
	a := &limiterArgs{algorithm: int(c.Algorithm), family: -1, interval: c.Interval, window: c.Window, shown: c.Shown}
	// window1.lua's kind: 0 fixed, 1 sliding, 1 + the calendar for weeks,
	// months and years in UTC, which it computes from day counts; a UTC
	// calendar day is the epoch's 24 hours.
	kind, flatWindow := flag(c.Algorithm == policy.SlidingWindow), c.Window
	utc := c.Zone == time.UTC
	if c.Calendar != policy.CalendarNone {
		// decide.lua's calendar window: its edges, from the decider's
		// clock, are each call's (see appendGeneral); local counting takes
		// epoch-aligned windows alone.
		window = -1
		a.calendar, a.zone = c.Calendar, c.Zone
		kind = 1 + int(c.Calendar)
		if c.Calendar == policy.CalendarDay {
			kind, flatWindow = 0, 24*time.Hour.Microseconds()
		}
	}
	a.general = []any{c.Capacity, c.Shown, c.Limit, window,
		float(c.Interval), float(c.PerUS), float(c.Bound), c.Gran, c.Buckets, c.LeaseTTL,
		flag(c.Warm), float(c.Stable), float(c.Threshold), float(c.MaxPermits), float(c.Slope), float(c.CoolDown)}
	switch {
	case (c.Algorithm == policy.TokenBucket || c.Algorithm == policy.GCRA) && !c.Warm:
		a.family, a.param = familyMeter, float(c.Interval)
	case c.Algorithm == policy.FixedWindow && c.Calendar == policy.CalendarNone:
		a.family, a.param = familyFixed, c.Window
	}
	switch {
	case c.Algorithm <= policy.LeakyBucket && !c.Warm:
		a.singleScript = single
		a.single = []any{c.Capacity, c.Shown, float(c.Interval), float(c.PerUS), float(c.Bound), flag(c.Algorithm == policy.LeakyBucket)}
		a.multi = append([]any{0}, a.single...)
	case (c.Algorithm == policy.FixedWindow || c.Algorithm == policy.SlidingWindow) && (c.Calendar == policy.CalendarNone || utc):
		// Calendar windows in a time zone are decide.lua's alone: the
		// flat scripts have no room for their edges.
		a.singleScript = window1
		a.single = []any{c.Capacity, c.Shown, c.Limit, flatWindow, kind, float(limit.Slack)}
		a.multi = append([]any{1}, a.single...)
	}
	return a
}

// partitionAt is where an adaptive rule's partition (limit.Partition)
// stands in a rule's fields of decide.lua: in place of gran.
const partitionAt = 7

// edgesAt is where a calendar window's edges stand in a rule's
// fields of decide.lua: in place of interval, per_us, bound and gran.
const edgesAt = 4

// appendGeneral appends st's fields of decide.lua, with a calendar
// window's edges around now (µs, or "" for the decider's clock).
func appendGeneral(args []any, st *limiterArgs, now string) []any {
	i := len(args)
	args = append(args, st.general...)
	if st.calendar != policy.CalendarNone {
		t, err := strconv.ParseInt(now, 10, 64)
		if err != nil {
			t = time.Now().UnixMicro()
		}
		edges := st.edges.Load()
		if edges == nil || t < edges[1] || t >= edges[2] {
			e := limit.CalendarEdges(t, st.calendar, st.zone)
			edges = &e
			st.edges.Store(edges)
		}
		for k, edge := range edges {
			args[i+edgesAt+k] = edge
		}
	}
	return args
}

// argCache holds limiterArgs by limiter, for as long as the limiter lives:
// entries are keyed by weak pointers and removed once their limiter is
// collected, so replaced configs leave nothing behind.
type argCache struct{ m sync.Map } // weak.Pointer[limit.Limiter] → *limiterArgs

func (c *argCache) get(l *limit.Limiter) *limiterArgs {
	k := weak.Make(l)
	if v, ok := c.m.Load(k); ok {
		return v.(*limiterArgs)
	}
	v, loaded := c.m.LoadOrStore(k, newLimiterArgs(l))
	if !loaded {
		runtime.AddCleanup(l, func(k weak.Pointer[limit.Limiter]) { c.m.Delete(k) }, k)
	}
	return v.(*limiterArgs)
}

// float formats x in its shortest exact form, so Lua parses the same double.
func float(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// flag is a script's boolean argument.
func flag(v bool) int {
	if v {
		return 1
	}
	return 0
}
