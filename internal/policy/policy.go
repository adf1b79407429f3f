// Package policy holds Sluice's domain: tenants, tiers, rules, overrides, keys
// and config snapshots, their validation, descriptor matching and the
// construction of counter keys. It imports only the standard library.
package policy

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // the zones of Params.TimeZone, on hosts without a database
)

// Algorithm selects how a rule counts. The zero value is invalid.
type Algorithm uint8

// The algorithms a rule can use. Their semantics are documented in
// docs/algorithms.md and implemented by package limit.
const (
	AlgorithmUnspecified Algorithm = iota
	// TokenBucket refills Limit tokens per Window up to Burst; an optional
	// WarmUp makes a cold (long idle) bucket start slower, as Guava's
	// SmoothWarmingUp.
	TokenBucket
	// GCRA is the generic cell rate algorithm (a leaky bucket as a meter)
	// with redis-cell semantics: Limit per Window, Burst at once.
	GCRA
	// LeakyBucket is a leaky bucket as a queue: requests drain at Limit per
	// Window and wait up to MaxDelay instead of being rejected.
	LeakyBucket
	// FixedWindow counts per window aligned on the Unix epoch, or per
	// calendar day, week, month or year (Params.Calendar).
	FixedWindow
	// SlidingLog keeps the time of every admitted request: exact, O(Limit)
	// memory per key.
	SlidingLog
	// SlidingWindow weights the previous fixed window by how much of it
	// still overlaps the sliding window.
	SlidingWindow
	// SlidingBuckets divides the window into sub-buckets of Granularity.
	SlidingBuckets
	// Concurrency limits leases in flight; each lease expires after LeaseTTL
	// unless released.
	Concurrency
	// AdaptiveConcurrency limits leases in flight as Concurrency does, to a
	// limit computed every Window from the latency and outcomes the
	// requests show (Adaptation), between Floor and Limit: a limit that
	// finds a backend's capacity, one for the whole fleet.
	AdaptiveConcurrency
	algorithmCount
)

var algorithmNames = [...]string{"unspecified", "token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window", "sliding_buckets", "concurrency", "adaptive_concurrency"}

// Leases reports whether a holds leases, released by the caller.
func (a Algorithm) Leases() bool { return a == Concurrency || a == AdaptiveConcurrency }

// Adaptation is how an AdaptiveConcurrency rule computes its limit.
type Adaptation uint8

// Adaptations. Their values are stored: never renumber them.
const (
	// AdaptGradient compares the latency without load with the current
	// one, and shrinks the limit as requests queue.
	AdaptGradient Adaptation = iota
	// AdaptAIMD adds one a window while nothing is dropped and cuts the
	// limit by a tenth when requests are.
	AdaptAIMD
	adaptationCount
)

var adaptationNames = [...]string{"gradient", "aimd"}

func (a Adaptation) String() string {
	if int(a) < len(adaptationNames) {
		return adaptationNames[a]
	}
	return fmt.Sprintf("adaptation(%d)", a)
}

// ParseAdaptation returns the adaptation named s; "" is AdaptGradient.
func ParseAdaptation(s string) (Adaptation, error) {
	if s == "" {
		return AdaptGradient, nil
	}
	for i, n := range adaptationNames {
		if n == s {
			return Adaptation(i), nil
		}
	}
	return AdaptGradient, Errorf(CodeInvalid, "unknown adaptation %q: gradient or aimd", s)
}

// AlgorithmNames lists the algorithms' names, for messages.
var AlgorithmNames = strings.Join(algorithmNames[1:], ", ")

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// ParseAlgorithm returns the algorithm named s (as printed by String).
func ParseAlgorithm(s string) (Algorithm, error) {
	for i := 1; i < len(algorithmNames); i++ {
		if algorithmNames[i] == s {
			return Algorithm(i), nil
		}
	}
	return AlgorithmUnspecified, Errorf(CodeInvalid, "unknown algorithm %q", s)
}

// FailureMode says what a rule answers when its shared counter store (Redis)
// cannot be reached in time.
type FailureMode uint8

// Failure modes. Their values are stored (the audit log's JSON): never
// renumber them. The zero value is FailOpen, but a rule made without
// naming one, through the API, a tenant file or an import, gets
// DefaultFailureMode.
const (
	FailOpen   FailureMode = iota // allow
	FailClosed                    // reject
	FailLocal                     // enforce with the in-process engine at a share of the limit
)

// DefaultFailureMode is the failure mode of a rule that names none: a rule
// still limits while Redis is away.
const DefaultFailureMode = FailLocal

var failureModeNames = [...]string{"open", "closed", "local"}

func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("failure_mode(%d)", m)
}

// Valid reports whether m is one of the failure modes.
func (m FailureMode) Valid() bool { return int(m) < len(failureModeNames) }

// ParseFailureMode returns the failure mode named s; "" is
// DefaultFailureMode.
func ParseFailureMode(s string) (FailureMode, error) {
	if s == "" {
		return DefaultFailureMode, nil
	}
	for i, n := range failureModeNames {
		if n == s {
			return FailureMode(i), nil
		}
	}
	return DefaultFailureMode, Errorf(CodeInvalid, "unknown failure mode %q", s)
}

// Scope is where a rule's limit holds: in each region on its own, or once
// across every region of a deployment (docs/operations.md, "Several
// regions").
type Scope uint8

// The scopes. The values are the API's (sluice.v1.Scope) and are stored:
// never renumber them.
const (
	// ScopeRegion holds the limit in each region: each region's deciders
	// count in their own Redis, and a client may take the limit in every
	// region.
	ScopeRegion Scope = iota
	// ScopeGlobal holds one limit across regions: each region counts its
	// own admissions exactly and adds the other regions' counts, as last
	// replicated, without waiting on them. Fixed and sliding windows, GCRA
	// and token buckets without warm-up.
	ScopeGlobal
)

var scopeNames = [...]string{"region", "global"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", s)
}

// ParseScope returns the scope named s; "" is ScopeRegion.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return ScopeRegion, nil
	}
	for i, n := range scopeNames {
		if n == s {
			return Scope(i), nil
		}
	}
	return ScopeRegion, Errorf(CodeInvalid, "unknown scope %q: region or global", s)
}

// Calendar aligns a FixedWindow rule's windows on the calendar instead of
// on the Unix epoch: a quota of so many requests a calendar month, say,
// that starts afresh on the 1st at midnight, in UTC or in Params.TimeZone.
// The zero value is none: the window is Params.Window.
type Calendar uint8

// The calendar windows. The values are the API's (sluice.v1.Calendar).
const (
	CalendarNone  Calendar = iota
	CalendarWeek           // from Monday 00:00 (ISO 8601 weeks)
	CalendarMonth          // from the 1st, 00:00
	CalendarYear           // from January 1st, 00:00
	CalendarDay            // from 00:00
	calendarCount
)

var calendarNames = [...]string{"", "week", "month", "year", "day"}

func (c Calendar) String() string {
	if int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return fmt.Sprintf("calendar(%d)", c)
}

// ParseCalendar returns the calendar window named s; "" is CalendarNone.
func ParseCalendar(s string) (Calendar, error) {
	for i, n := range calendarNames {
		if n == s {
			return Calendar(i), nil
		}
	}
	return CalendarNone, Errorf(CodeInvalid, "unknown calendar window %q: day, week, month or year", s)
}

// Span returns the nominal length of c's windows (1, 7, 30 and 365 days),
// for what reports a window as one duration: the RateLimit-Policy header's
// w, Envoy's unit. The window holding a time is exact (see package limit),
// days of 23 or 25 hours in a time zone's changes of offset included.
func (c Calendar) Span() time.Duration {
	switch c {
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 30 * 24 * time.Hour
	case CalendarYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Location returns the time zone named name (an IANA name such as
// "America/New_York"; "" and "UTC" are UTC). A host's zone database is
// used, else the one embedded in the binary (time/tzdata), so that a
// host without one (a distroless image) knows every zone too. "Local",
// the host's own zone, is refused: it differs between hosts.
func Location(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if v, ok := locations.Load(name); ok {
		return v.(*time.Location), nil
	}
	if name == "Local" || len(name) > maxTimeZone {
		return nil, Errorf(CodeInvalid, "unknown time zone %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, Errorf(CodeInvalid, "unknown time zone %q: an IANA name such as Europe/Paris", name)
	}
	locations.Store(name, loc)
	return loc, nil
}

// maxTimeZone bounds a time zone's name (the longest IANA name has 32
// characters).
const maxTimeZone = 64

// locations caches Location's zones: loading one reads and parses the
// embedded database.
var locations sync.Map // name → *time.Location

// Params are a rule's algorithm and its parameters. Which fields apply
// depends on Algorithm; Validate rejects the ones that do not.
type Params struct {
	Algorithm Algorithm
	// Limit is the number of cost units per Window (the rate Limit/Window
	// for bucket algorithms), or the units in flight for Concurrency, or
	// the most AdaptiveConcurrency's limit may reach (its ceiling).
	Limit int64
	// Window is the period of Limit; AdaptiveConcurrency computes its
	// limit again every Window. Resolution is one microsecond.
	Window time.Duration
	// Calendar (FixedWindow only) makes the windows calendar days,
	// weeks, months or years in place of Window, which is then 0.
	Calendar Calendar
	// TimeZone (with Calendar only) is the IANA time zone whose midnights
	// start the calendar windows; "" is UTC. A daily quota of a service in
	// California resets at midnight in "America/Los_Angeles".
	TimeZone string
	// Burst is the bucket capacity of TokenBucket and GCRA; 0 means Limit.
	Burst int64
	// WarmUp (TokenBucket only) is how long a cold bucket takes to reach
	// the stable rate; 0 disables warm-up.
	WarmUp time.Duration
	// ColdFactor (TokenBucket with WarmUp) is how many times slower a cold
	// bucket admits than the stable rate; 0 means 3, Guava's default.
	ColdFactor float64
	// MaxDelay (LeakyBucket only) bounds how long a request may wait in
	// the queue.
	MaxDelay time.Duration
	// Granularity (SlidingBuckets only) is the sub-bucket width; Window
	// must be a multiple of it.
	Granularity time.Duration
	// LeaseTTL (Concurrency, AdaptiveConcurrency) is how long a lease
	// lives unless released. An adaptive rule's lease that expires counts
	// as a request dropped.
	LeaseTTL time.Duration
	// Floor (AdaptiveConcurrency only) is the least its limit falls to; 0
	// means 1, so that a backend that takes one request at a time is
	// protected.
	Floor int64
	// Adaptation (AdaptiveConcurrency only) is how the limit is computed.
	Adaptation Adaptation
}

// AdaptiveWindow bounds an AdaptiveConcurrency rule's Window.
const (
	MinAdaptiveWindow = 100 * time.Millisecond
	MaxAdaptiveWindow = time.Minute
)

// LeastLimit is an AdaptiveConcurrency rule's floor (Floor, else 1).
func (p Params) LeastLimit() int64 { return max(p.Floor, 1) }

// WithLimit is p with its limit set to limit and its burst, when it has
// one, grown or shrunk in proportion, so that a client given ten times a
// rule's rate also gets ten times its bursts (100 a minute, 10 at once,
// raised to 1,000 a minute: 100 at once), never below 1. Inherit uses it
// for partial parameters that give a limit and no burst.
func (p Params) WithLimit(limit int64) Params {
	if p.Burst > 0 && p.Limit > 0 {
		p.Burst = max(1, int64(math.Round(float64(p.Burst)*float64(limit)/float64(p.Limit))))
	}
	p.Limit = limit
	return p
}

// Partial reports whether p names no algorithm: it gives only what it
// changes of another's parameters (see Inherit).
func (p Params) Partial() bool { return p.Algorithm == AlgorithmUnspecified }

// Inherit is p completed from base when p is partial: base's parameters
// with those p gives (its non-zero fields) in their place, base's burst
// following p's limit (WithLimit) unless p gives a burst, and a window in
// place of base's calendar or the reverse. Whole parameters (naming their
// algorithm) are p as it is. Overrides are written this way: "1,000 a
// minute" of a rule's token bucket keeps the bucket.
func (p Params) Inherit(base Params) Params {
	if !p.Partial() {
		return p
	}
	out := base
	if p.Limit != 0 && p.Burst == 0 {
		out = out.WithLimit(p.Limit)
	}
	if p.Window != 0 || p.Calendar != CalendarNone {
		out.Window, out.Calendar = p.Window, p.Calendar
		if p.Calendar == CalendarNone {
			out.TimeZone = "" // a window has no zone
		}
	}
	given(&out.TimeZone, p.TimeZone)
	given(&out.Limit, p.Limit)
	given(&out.Burst, p.Burst)
	given(&out.WarmUp, p.WarmUp)
	given(&out.ColdFactor, p.ColdFactor)
	given(&out.MaxDelay, p.MaxDelay)
	given(&out.Granularity, p.Granularity)
	given(&out.LeaseTTL, p.LeaseTTL)
	given(&out.Floor, p.Floor)
	given(&out.Adaptation, p.Adaptation)
	return out
}

// given sets *dst to v unless v is the zero value (not given).
func given[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// Bounds on parameters. They keep every state small and every value exact
// in the float64 arithmetic shared by the Go and Lua implementations.
const (
	MaxLimit          = 1_000_000_000
	MaxLogLimit       = 10_000 // SlidingLog and Concurrency keep one entry per unit
	MinWindow         = time.Millisecond
	MaxWindow         = 366 * 24 * time.Hour
	MaxBuckets        = 1024
	MaxColdFactor     = 100
	MaxLeaseTTL       = 24 * time.Hour
	MaxMatchers       = 16
	MaxKeyBy          = 8
	MaxNameLen        = 100
	MaxDescriptorKey  = 64
	MaxDescriptorVal  = 256
	MaxDescriptors    = 32
	MaxRulesPerTier   = 1000
	MaxOverrides      = 100_000
	DefaultColdFactor = 3
)

// Bounds on what one tenant holds: every decider keeps each tenant's whole
// configuration, its check keys' hashes included, in memory, so no tenant
// may grow it without end at the others' cost.
const (
	MaxTiers    = 100   // per tenant
	MaxLiveKeys = 1_000 // unrevoked keys per tenant
)

// Period returns the length of p's window: Window, or a calendar
// window's nominal span (Calendar.Span).
func (p Params) Period() time.Duration {
	if p.Calendar != CalendarNone {
		return p.Calendar.Span()
	}
	return p.Window
}

// Capacity returns the largest cost one request can have and still be
// admitted: Burst (or Limit) for bucket algorithms, Limit otherwise.
func (p Params) Capacity() int64 {
	switch p.Algorithm {
	case TokenBucket, GCRA:
		if p.Burst > 0 {
			return p.Burst
		}
	}
	return p.Limit
}

// Validate returns an *Error with CodeInvalid and one FieldError per
// problem, or nil.
func (p Params) Validate() error {
	fe := newFieldErrors()
	p.validate(fe)
	return fe.err("limit parameters")
}

func (p Params) validate(fe fieldErrors) {
	if p.Algorithm == AlgorithmUnspecified || p.Algorithm >= algorithmCount {
		fe.add("algorithm", "must be one of %s", AlgorithmNames)
		return
	}
	maxLimit := int64(MaxLimit)
	if p.Algorithm == SlidingLog || p.Algorithm.Leases() {
		maxLimit = MaxLogLimit
	}
	if p.Limit < 1 || p.Limit > maxLimit {
		fe.add("limit", "must be between 1 and %d for %s", maxLimit, p.Algorithm)
	}
	switch {
	case p.Calendar != CalendarNone:
		if p.Calendar >= calendarCount {
			fe.add("calendar", "must be day, week, month or year")
		} else if p.Algorithm != FixedWindow {
			fe.add("calendar", "applies only to fixed_window")
		}
		if p.Window != 0 {
			fe.add("window", "must be empty with a calendar window (the window is the calendar %s)", p.Calendar)
		}
	case p.Algorithm == AdaptiveConcurrency:
		checkDuration(fe, "window", p.Window, MinAdaptiveWindow, MaxAdaptiveWindow)
	case p.Algorithm != Concurrency:
		checkDuration(fe, "window", p.Window, MinWindow, MaxWindow)
	case p.Window != 0:
		fe.add("window", "does not apply to concurrency")
	}
	if p.TimeZone != "" {
		if p.Calendar == CalendarNone {
			fe.add("time_zone", "applies only to calendar windows")
		} else if _, err := Location(p.TimeZone); err != nil {
			fe.add("time_zone", "unknown time zone %q: an IANA name such as Europe/Paris, or empty for UTC", p.TimeZone)
		}
	}
	switch p.Algorithm {
	case TokenBucket, GCRA:
		if p.Burst < 0 || p.Burst > MaxLimit {
			fe.add("burst", "must be between 0 (the limit) and %d", MaxLimit)
		}
	default:
		if p.Burst != 0 {
			fe.add("burst", "applies only to token_bucket and gcra")
		}
	}
	if p.Algorithm == TokenBucket {
		if p.WarmUp != 0 {
			checkDuration(fe, "warm_up", p.WarmUp, time.Microsecond, MaxWindow)
		}
		if p.ColdFactor != 0 && !(p.ColdFactor > 1 && p.ColdFactor <= MaxColdFactor) {
			fe.add("cold_factor", "must be above 1 and at most %d (0 means %d)", MaxColdFactor, DefaultColdFactor)
		}
		if p.ColdFactor != 0 && p.WarmUp == 0 {
			fe.add("cold_factor", "applies only with warm_up")
		}
		cold := p.ColdFactor
		if cold == 0 {
			cold = DefaultColdFactor
		}
		if p.WarmUp != 0 && float64(p.Capacity()) < cold {
			// A cold bucket's first permit costs cold_factor intervals; a
			// smaller burst could never admit anything while cold.
			fe.add("burst", "must be at least cold_factor (%g) with warm_up", cold)
		}
	} else {
		if p.WarmUp != 0 {
			fe.add("warm_up", "applies only to token_bucket")
		}
		if p.ColdFactor != 0 {
			fe.add("cold_factor", "applies only to token_bucket")
		}
	}
	if p.Algorithm == LeakyBucket {
		checkDuration(fe, "max_delay", p.MaxDelay, 0, MaxWindow)
	} else if p.MaxDelay != 0 {
		fe.add("max_delay", "applies only to leaky_bucket")
	}
	if p.Algorithm == SlidingBuckets {
		switch {
		case p.Granularity < time.Microsecond || p.Granularity%time.Microsecond != 0:
			fe.add("granularity", "must be a positive whole number of microseconds")
		case p.Window%p.Granularity != 0:
			fe.add("granularity", "must divide the window exactly")
		case p.Window/p.Granularity < 2 || p.Window/p.Granularity > MaxBuckets:
			fe.add("granularity", "must give between 2 and %d sub-buckets per window", MaxBuckets)
		}
	} else if p.Granularity != 0 {
		fe.add("granularity", "applies only to sliding_buckets")
	}
	if p.Algorithm.Leases() {
		checkDuration(fe, "lease_ttl", p.LeaseTTL, time.Millisecond, MaxLeaseTTL)
	} else if p.LeaseTTL != 0 {
		fe.add("lease_ttl", "applies only to concurrency and adaptive_concurrency")
	}
	if p.Algorithm == AdaptiveConcurrency {
		if p.Floor < 0 || p.Floor > p.Limit {
			fe.add("floor", "must be between 0 (1) and the limit, the ceiling (%d)", p.Limit)
		}
		if p.Adaptation >= adaptationCount {
			fe.add("adaptation", "must be gradient or aimd")
		}
	} else {
		if p.Floor != 0 {
			fe.add("floor", "applies only to adaptive_concurrency")
		}
		if p.Adaptation != AdaptGradient {
			fe.add("adaptation", "applies only to adaptive_concurrency")
		}
	}
}

func checkDuration(fe fieldErrors, field string, d, lo, hi time.Duration) {
	switch {
	case d < lo || d > hi:
		fe.add(field, "must be between %s and %s", lo, hi)
	case d%time.Microsecond != 0:
		fe.add(field, "must be a whole number of microseconds")
	}
}
