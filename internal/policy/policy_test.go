package policy

import (
	"bytes"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func validRule() Rule {
	return Rule{
		ID: "r1", Name: "login attempts",
		Match:   []Match{{Key: "route", Value: "/login"}, {Key: "method", Value: "POST"}},
		KeyBy:   []string{"client_id"},
		Params:  Params{Algorithm: TokenBucket, Limit: 10, Window: time.Minute},
		Enabled: true,
	}
}

// fields returns the field paths of err's details.
func fields(err error) []string {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	var out []string
	for _, f := range e.Fields {
		out = append(out, f.Field)
	}
	return out
}

func TestRuleValidateReportsEachField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Rule)
		want   []string
	}{
		{"valid", func(*Rule) {}, nil},
		{"no name", func(r *Rule) { r.Name = "" }, []string{"name"}},
		{"no algorithm", func(r *Rule) { r.Algorithm = 0 }, []string{"algorithm"}},
		{"zero limit", func(r *Rule) { r.Limit = 0 }, []string{"limit"}},
		{"huge limit", func(r *Rule) { r.Limit = MaxLimit + 1 }, []string{"limit"}},
		{"tiny window", func(r *Rule) { r.Window = time.Microsecond }, []string{"window"}},
		{"sub-microsecond window", func(r *Rule) { r.Window = time.Second + 1 }, []string{"window"}},
		{"window too long", func(r *Rule) { r.Window = MaxWindow + time.Second }, []string{"window"}},
		{"negative burst", func(r *Rule) { r.Burst = -1 }, []string{"burst"}},
		{"bad match key", func(r *Rule) { r.Match[1].Key = "bad key!" }, []string{"match[1].key"}},
		{"empty match value", func(r *Rule) { r.Match[0].Value = "" }, []string{"match[0].value"}},
		{"a condition twice", func(r *Rule) { r.Match[1] = r.Match[0] }, []string{"match[1].value"}},
		{"two values of a key", func(r *Rule) { r.Match[1] = Match{Key: "route", Value: "/signin"} }, nil},
		{"two values of a key in an exact rule", func(r *Rule) { r.Match[1], r.Exact = Match{Key: "route", Value: "/signin"}, true },
			[]string{"match[1].key"}},
		{"duplicate key_by", func(r *Rule) { r.KeyBy = []string{"ip", "ip"} }, []string{"key_by[1]"}},
		{"max_delay on a bucket", func(r *Rule) { r.MaxDelay = time.Second }, []string{"max_delay"}},
		{"several at once", func(r *Rule) { r.Name, r.Limit, r.Granularity = "", -5, time.Second },
			[]string{"name", "limit", "granularity"}},
		{"warm-up burst below cold factor", func(r *Rule) { r.WarmUp, r.Burst = time.Second, 2 }, []string{"burst"}},
		{"cold factor without warm-up", func(r *Rule) { r.ColdFactor = 2 }, []string{"cold_factor"}},
		{"bad failure mode", func(r *Rule) { r.FailureMode = 9 }, []string{"failure_mode"}},
		{"local counting", func(r *Rule) { r.Sync = 100 * time.Millisecond }, nil},
		{"sync too short", func(r *Rule) { r.Sync = time.Millisecond }, []string{"sync"}},
		{"sync too long", func(r *Rule) { r.Sync = time.Hour }, []string{"sync"}},
		{"sync of a sliding log", func(r *Rule) { r.Algorithm, r.Sync = SlidingLog, time.Second }, []string{"sync"}},
		{"sync with warm-up", func(r *Rule) { r.WarmUp, r.Sync = time.Second, time.Second }, []string{"sync"}},
		{"sliding log too large", func(r *Rule) { r.Algorithm, r.Limit = SlidingLog, MaxLogLimit+1 }, []string{"limit"}},
		{"buckets not dividing", func(r *Rule) {
			r.Algorithm, r.Granularity = SlidingBuckets, 7*time.Second
		}, []string{"granularity"}},
		{"concurrency with a window", func(r *Rule) { r.Algorithm, r.LeaseTTL = Concurrency, time.Second }, []string{"window"}},
		{"concurrency without ttl", func(r *Rule) { r.Algorithm, r.Window = Concurrency, 0 }, []string{"lease_ttl"}},
		{"adaptive concurrency", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.LeaseTTL, r.Floor, r.Adaptation = AdaptiveConcurrency, 0, 100*time.Millisecond, time.Minute, 2, AdaptAIMD
		}, nil},
		{"adaptive concurrency, its window too short", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.LeaseTTL = AdaptiveConcurrency, 0, 10*time.Millisecond, time.Minute
		}, []string{"window"}},
		{"adaptive concurrency, its floor over its ceiling", func(r *Rule) {
			r.Algorithm, r.Burst, r.LeaseTTL, r.Floor, r.Adaptation = AdaptiveConcurrency, 0, time.Minute, r.Limit+1, 7
		}, []string{"floor", "adaptation"}},
		{"a floor elsewhere", func(r *Rule) { r.Floor, r.Adaptation = 1, AdaptAIMD }, []string{"floor", "adaptation"}},
		{"adaptive partitions", func(r *Rule) {
			r.Algorithm, r.Burst, r.LeaseTTL, r.PartitionBy, r.Partitions = AdaptiveConcurrency, 0, time.Minute, "plan", []Partition{{"gold", 0.6}, {"free", 0.4}}
		}, nil},
		{"partitions over the limit", func(r *Rule) {
			r.Algorithm, r.Burst, r.LeaseTTL, r.PartitionBy, r.Partitions = AdaptiveConcurrency, 0, time.Minute, "plan", []Partition{{"gold", 0.8}, {"gold", 0.4}, {"x", 0}}
		}, []string{"partitions[1].value", "partitions[2].share", "partitions"}},
		{"partitions without partition_by", func(r *Rule) {
			r.Algorithm, r.Burst, r.LeaseTTL, r.Partitions = AdaptiveConcurrency, 0, time.Minute, []Partition{{"gold", 0.5}}
		}, []string{"partition_by"}},
		{"partitions of a token bucket", func(r *Rule) { r.PartitionBy, r.Partitions = "plan", []Partition{{"gold", 0.5}} }, []string{"partitions"}},
		{"a calendar month", func(r *Rule) { r.Algorithm, r.Burst, r.Window, r.Calendar = FixedWindow, 0, 0, CalendarMonth }, nil},
		{"a calendar window and a window", func(r *Rule) { r.Algorithm, r.Burst, r.Calendar = FixedWindow, 0, CalendarYear }, []string{"window"}},
		{"a calendar token bucket", func(r *Rule) { r.Window, r.Calendar = 0, CalendarWeek }, []string{"calendar"}},
		{"an unknown calendar", func(r *Rule) { r.Algorithm, r.Burst, r.Window, r.Calendar = FixedWindow, 0, 0, 9 }, []string{"calendar"}},
		{"a calendar day in a zone", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.Calendar, r.TimeZone = FixedWindow, 0, 0, CalendarDay, "America/Los_Angeles"
		}, nil},
		{"an unknown zone", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.Calendar, r.TimeZone = FixedWindow, 0, 0, CalendarDay, "America/Gotham"
		}, []string{"time_zone"}},
		{"the host's zone", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.Calendar, r.TimeZone = FixedWindow, 0, 0, CalendarDay, "Local"
		}, []string{"time_zone"}},
		{"a zone without a calendar", func(r *Rule) { r.TimeZone = "Europe/Paris" }, []string{"time_zone"}},
		{"a message", func(r *Rule) { r.Message = "Free plans make 100 searches an hour: see https://example.com/pricing" }, nil},
		{"a long message", func(r *Rule) { r.Message = strings.Repeat("x", MaxMessageLen+1) }, []string{"message"}},
		{"a message of two lines", func(r *Rule) { r.Message = "slow down\nplease" }, []string{"message"}},
		{"a message not UTF-8", func(r *Rule) { r.Message = "\xff" }, []string{"message"}},
		{"a global fixed window", func(r *Rule) { r.Algorithm, r.Burst, r.Scope = FixedWindow, 0, ScopeGlobal }, nil},
		{"a global sliding window", func(r *Rule) { r.Algorithm, r.Burst, r.Scope = SlidingWindow, 0, ScopeGlobal }, nil},
		{"a global calendar month", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.Calendar, r.Scope = FixedWindow, 0, 0, CalendarMonth, ScopeGlobal
		}, nil},
		{"a global token bucket", func(r *Rule) { r.Scope = ScopeGlobal }, nil},
		{"a global warming bucket", func(r *Rule) { r.Scope, r.WarmUp = ScopeGlobal, time.Second }, []string{"scope"}},
		{"a global sliding log", func(r *Rule) { r.Algorithm, r.Burst, r.Scope = SlidingLog, 0, ScopeGlobal }, []string{"scope"}},
		{"a global window with sync", func(r *Rule) {
			r.Algorithm, r.Burst, r.Scope, r.Sync = FixedWindow, 0, ScopeGlobal, time.Second
		}, []string{"scope"}},
		{"an unknown scope", func(r *Rule) { r.Scope = 7 }, []string{"scope"}},
		{"sync of a calendar window", func(r *Rule) {
			r.Algorithm, r.Burst, r.Window, r.Calendar, r.Sync = FixedWindow, 0, 0, CalendarMonth, time.Second
		}, []string{"sync"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := validRule()
			r.Match = slices.Clone(r.Match)
			tt.mutate(&r)
			err := r.Validate()
			if got := fields(err); !slices.Equal(got, tt.want) {
				t.Fatalf("fields %v, want %v (err: %v)", got, tt.want, err)
			}
			if tt.want != nil && (!errors.Is(err, ErrInvalid) || ErrorCode(err) != CodeInvalid) {
				t.Fatalf("error %v is not CodeInvalid", err)
			}
		})
	}
}

func TestTierValidateNestsRuleFields(t *testing.T) {
	t.Parallel()
	a, b := validRule(), validRule()
	b.Limit = 0
	tier := Tier{Name: "Free Tier", Rules: []Rule{a, b}}
	got := fields(tier.Validate())
	want := []string{"name", "rules[1].limit", "rules[1].name"}
	if !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
}

func TestOverrideValidate(t *testing.T) {
	t.Parallel()
	good := &Params{Algorithm: FixedWindow, Limit: 100, Window: time.Minute}
	tests := []struct {
		o    Override
		want []string
	}{
		{Override{Identifier: "vip-*", Tier: "pro"}, nil},
		{Override{Identifier: "client-9", RuleID: "r1", Params: good}, nil},
		{Override{Identifier: "*@example.com", Tier: "pro"}, nil}, // a pattern: a suffix
		{Override{Identifier: "x"}, []string{"tier"}},
		{Override{Identifier: "x", Tier: "pro", RuleID: "r1"}, []string{"tier"}},
		{Override{Identifier: "x", RuleID: "r1"}, []string{"params"}},
		{Override{Identifier: "x", RuleID: "r1", Params: &Params{Algorithm: FixedWindow}}, []string{"params.limit", "params.window"}},
	}
	for i, tt := range tests {
		if got := fields(tt.o.Validate()); !slices.Equal(got, tt.want) {
			t.Errorf("case %d: fields %v, want %v", i, got, tt.want)
		}
	}
}

func TestOverrideApplies(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prefix := Override{Identifier: "vip-*"}
	exact := Override{Identifier: "vip-1", ExpiresAt: now.Add(time.Hour)}
	suffix := Override{Identifier: "*@example.com"}
	switch {
	case !prefix.Applies("vip-42", now), prefix.Applies("vi", now):
		t.Fatal("prefix match")
	case !suffix.Applies("bob@example.com", now), suffix.Applies("bob@example.com.evil", now):
		t.Fatal("suffix match")
	case !exact.Applies("vip-1", now), exact.Applies("vip-10", now):
		t.Fatal("exact match")
	case exact.Applies("vip-1", now.Add(time.Hour)):
		t.Fatal("an expired override still applies")
	}
}

func TestRuleMatches(t *testing.T) {
	t.Parallel()
	r := validRule()
	r.Match = append(r.Match, Match{Key: "client_id", Value: AnyValue})
	d := Descriptors{{"route", "/login"}, {"method", "POST"}, {"client_id", "c1"}}
	if !r.Matches(d) {
		t.Fatal("all conditions hold")
	}
	if r.Matches(d[:2]) {
		t.Fatal("matched without the client_id descriptor")
	}
	if r.Matches(Descriptors{{"route", "/login"}, {"method", "GET"}, {"client_id", "c1"}}) {
		t.Fatal("matched another method")
	}
	if !(&Rule{}).Matches(nil) {
		t.Fatal("an empty match must match everything")
	}
	// Of several conditions on one key, any holds; each key must.
	either := &Rule{Match: []Match{{"route", "/v1/*"}, {"method", "GET"}, {"route", "/v2/users"}, {"method", "HEAD"}}}
	for _, tc := range []struct {
		d    Descriptors
		want bool
	}{
		{Descriptors{{"route", "/v1/x"}, {"method", "GET"}}, true},
		{Descriptors{{"method", "HEAD"}, {"route", "/v2/users"}}, true},
		{Descriptors{{"route", "/v2/users"}, {"method", "POST"}}, false},
		{Descriptors{{"route", "/v2/users/1"}, {"method", "GET"}}, false},
		{Descriptors{{"route", "/v1/x"}}, false},
		{Descriptors{{"method", "GET"}}, false},
	} {
		if got := either.Matches(tc.d); got != tc.want {
			t.Errorf("route /v1/* or /v2/users, method GET or HEAD, on %v: %v", tc.d, got)
		}
	}
	prefix := &Rule{Match: []Match{{Key: "route", Value: "/api/*"}}}
	for v, want := range map[string]bool{"/api/": true, "/api/users": true, "/api": false, "/apis": false, "": false} {
		if got := prefix.Matches(Descriptors{{"route", v}}); got != want {
			t.Errorf("/api/* on %q: %v", v, got)
		}
	}
}

func TestExactRules(t *testing.T) {
	t.Parallel()
	rule := func(kv ...string) *Rule {
		r := &Rule{Exact: true}
		for i := 0; i < len(kv); i += 2 {
			r.Match = append(r.Match, Match{Key: kv[i], Value: kv[i+1]})
		}
		return r
	}
	d := Descriptors{{"client_id", "c1"}, {"route", "/login"}}
	if !rule("route", "*", "client_id", "c1").Matches(d) || rule("client_id", "*").Matches(d) || rule().Matches(d) || !rule().Matches(nil) {
		t.Fatal("an exact rule matches requests with its match keys and no others")
	}
	if rule("client_id", "*", "route", "*").Matches(Descriptors{{"client_id", "c1"}, {"client_id", "c2"}}) {
		t.Fatal("matched a repeated descriptor in place of a missing one")
	}
	// The first match key where one asks for a value and the other takes
	// any decides, whatever follows.
	defaults, specific := rule("client_id", "*", "route", "*"), rule("client_id", "*", "route", "/login")
	first := rule("client_id", "c1", "route", "*")
	short, long := rule("client_id", "*", "route", "/l*"), rule("client_id", "*", "route", "/log*")
	for _, tc := range []struct {
		r, s *Rule
		want bool
	}{
		{defaults, specific, true}, {specific, defaults, false},
		{specific, first, true}, {first, specific, false},
		{defaults, defaults, false}, {first, first, false},
		// A value beats a prefix, a longer prefix a shorter, a prefix any.
		{defaults, short, true}, {short, long, true}, {long, specific, true},
		{long, short, false}, {specific, long, false}, {short, defaults, false},
	} {
		if got := tc.r.MoreSpecific(tc.s); got != tc.want {
			t.Errorf("%v.MoreSpecific(%v) = %v", tc.r.Match, tc.s.Match, got)
		}
	}
}

func TestCounterKeyIsInjective(t *testing.T) {
	t.Parallel()
	r := &Rule{ID: "r1", KeyBy: []string{"a", "b"}}
	k1 := AppendCounterKey(nil, "t1", r, Descriptors{{"a", "x|1:y"}, {"b", ""}})
	k2 := AppendCounterKey(nil, "t1", r, Descriptors{{"a", "x"}, {"b", "y"}})
	k3 := AppendCounterKey(nil, "t1", r, Descriptors{{"a", "x"}})
	if bytes.Equal(k1, k2) || bytes.Equal(k2, k3) || bytes.Equal(k1, k3) {
		t.Fatalf("keys collide: %q %q %q", k1, k2, k3)
	}
	if got := string(k2); got != "{t1|1:x|1:y}r1" {
		t.Fatalf("key %q", got)
	}
	// A missing key-by descriptor counts under the empty value: omitting an
	// identifier does not escape the limit.
	if got := string(k3); got != "{t1|1:x|0:}r1" {
		t.Fatalf("key %q", got)
	}
}

func TestDescriptorsValidate(t *testing.T) {
	t.Parallel()
	long := string(make([]byte, MaxDescriptorVal+1))
	got := fields(Descriptors{{"ok", "v"}, {"", "v"}, {"k", long}, {"n", "a\x00b"}}.Validate())
	if want := []string{"descriptors[1].key", "descriptors[2].value", "descriptors[3].value"}; !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
}

func TestParseNames(t *testing.T) {
	t.Parallel()
	for a := TokenBucket; a < algorithmCount; a++ {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAlgorithm("unspecified"); ErrorCode(err) != CodeInvalid {
		t.Errorf("unspecified parsed: %v", err)
	}
	for c := CalendarNone; c < calendarCount; c++ {
		if got, err := ParseCalendar(c.String()); err != nil || got != c {
			t.Errorf("ParseCalendar(%q) = %v, %v", c, got, err)
		}
	}
	if _, err := ParseCalendar("fortnight"); ErrorCode(err) != CodeInvalid {
		t.Errorf("fortnight parsed: %v", err)
	}
	for m := FailOpen; m <= FailLocal; m++ {
		if got, err := ParseFailureMode(m.String()); err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v", m, got, err)
		}
	}
}

// FuzzRuleValidate: validation never panics, and whatever it accepts is
// within the bounds every engine relies on.
func FuzzRuleValidate(f *testing.F) {
	f.Add("r", "name", "route", "/x", "client_id", uint8(1), int64(10), int64(60e9), int64(0), int64(0), int64(0), int64(0), 0.0, int64(0), "x", uint8(0), "")
	f.Add("", "", "", "", "", uint8(9), int64(-1), int64(1), int64(-5), int64(3), int64(7), int64(-1), 2.5, int64(-1), "", uint8(7), "Local")
	f.Add("r", "name", "route", "/x", "client_id", uint8(4), int64(10), int64(1e9), int64(0), int64(0), int64(0), int64(0), 0.0, int64(1e8), "other", uint8(0), "")
	f.Add("r", "name", "route", "/x", "client_id", uint8(1), int64(10), int64(60e9), int64(0), int64(0), int64(0), int64(0), 0.0, int64(0), "name", uint8(0), "")
	f.Add("r", "name", "route", "/x", "client_id", uint8(4), int64(10), int64(0), int64(0), int64(0), int64(0), int64(0), 0.0, int64(0), "x", uint8(4), "America/New_York")
	f.Add("r", "name", "route", "/x", "client_id", uint8(4), int64(10), int64(0), int64(0), int64(0), int64(0), int64(0), 0.0, int64(0), "x", uint8(2), "../../etc/passwd")
	f.Fuzz(func(t *testing.T, id, name, mk, mv, kb string, alg uint8, limit, window, burst, warm, gran, ttl int64, cold float64, sync int64, replaces string, cal uint8, zone string) {
		r := Rule{ID: id, Name: name, Match: []Match{{mk, mv}}, KeyBy: []string{kb},
			Params: Params{Algorithm: Algorithm(alg), Limit: limit, Window: time.Duration(window), Burst: burst,
				WarmUp: time.Duration(warm), Granularity: time.Duration(gran), LeaseTTL: time.Duration(ttl), ColdFactor: cold,
				Calendar: Calendar(cal), TimeZone: zone},
			Sync: time.Duration(sync), Block: limit%2 == 0, Replaces: []string{replaces}}
		err := r.Validate()
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalid || len(e.Fields) == 0 {
				t.Fatalf("invalid rule without field details: %v", err)
			}
			return
		}
		p := r.Params
		if p.Limit < 1 || p.Limit > MaxLimit || p.Capacity() < 1 || p.Capacity() > MaxLimit {
			t.Fatalf("accepted out-of-bounds limits: %+v", p)
		}
		if p.Algorithm != Concurrency && p.Calendar == CalendarNone && (p.Window < MinWindow || p.Window > MaxWindow || p.Window%time.Microsecond != 0) {
			t.Fatalf("accepted window %v", p.Window)
		}
		if p.TimeZone != "" {
			if _, err := Location(p.TimeZone); err != nil || p.Calendar == CalendarNone || p.TimeZone == "Local" {
				t.Fatalf("accepted time zone %q with calendar %v", p.TimeZone, p.Calendar)
			}
		}
		if p.Calendar != CalendarNone && (p.Calendar >= calendarCount || p.Algorithm != FixedWindow || p.Window != 0) {
			t.Fatalf("accepted calendar %v for %+v", p.Calendar, p)
		}
		if replaces == r.Name || replaces == "" {
			t.Fatalf("accepted replaces %q of rule %q", replaces, r.Name)
		}
		if r.Sync != 0 && (r.Sync < MinSync || r.Sync > MaxSync || p.WarmUp != 0 ||
			p.Algorithm != TokenBucket && p.Algorithm != GCRA && p.Algorithm != FixedWindow) {
			t.Fatalf("accepted sync %v for %+v", r.Sync, p)
		}
	})
}

func TestWithLimitScalesTheBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, burst, to, wantBurst int64 }{
		{100, 10, 1000, 100}, // ten times the rate, ten times the bursts
		{100, 10, 15, 2},     // 1.5 rounds to 2
		{100, 10, 1, 1},      // never below 1
		{100, 0, 1000, 0},    // no burst of its own: the limit is the burst
		{0, 10, 5, 10},       // nothing to scale from
	} {
		p := Params{Algorithm: TokenBucket, Limit: tc.limit, Window: time.Minute, Burst: tc.burst}.WithLimit(tc.to)
		if p.Limit != tc.to || p.Burst != tc.wantBurst || p.Algorithm != TokenBucket || p.Window != time.Minute {
			t.Errorf("%d/%d to %d: %+v, want burst %d", tc.limit, tc.burst, tc.to, p, tc.wantBurst)
		}
	}
}

func TestInheritCompletesPartialParams(t *testing.T) {
	t.Parallel()
	rule := Params{Algorithm: TokenBucket, Limit: 100, Window: time.Minute, Burst: 10, WarmUp: time.Minute}
	monthly := Params{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarMonth}
	zoned := Params{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarDay, TimeZone: "Europe/Paris"}
	for _, tc := range []struct {
		name    string
		p, base Params
		want    Params
	}{
		{"a limit", Params{Limit: 1000}, rule, Params{Algorithm: TokenBucket, Limit: 1000, Window: time.Minute, Burst: 100, WarmUp: time.Minute}},
		{"a limit and a burst", Params{Limit: 1000, Burst: 5}, rule, Params{Algorithm: TokenBucket, Limit: 1000, Window: time.Minute, Burst: 5, WarmUp: time.Minute}},
		{"a window", Params{Window: time.Hour}, rule, Params{Algorithm: TokenBucket, Limit: 100, Window: time.Hour, Burst: 10, WarmUp: time.Minute}},
		{"a window for a calendar", Params{Window: time.Hour}, monthly, Params{Algorithm: FixedWindow, Limit: 1000, Window: time.Hour}},
		{"a calendar for a window", Params{Calendar: CalendarWeek}, Params{Algorithm: FixedWindow, Limit: 5, Window: time.Hour}, Params{Algorithm: FixedWindow, Limit: 5, Calendar: CalendarWeek}},
		{"a zone for a calendar's", Params{TimeZone: "Asia/Tokyo"}, zoned, Params{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarDay, TimeZone: "Asia/Tokyo"}},
		{"a calendar keeps the zone", Params{Calendar: CalendarWeek}, zoned, Params{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarWeek, TimeZone: "Europe/Paris"}},
		{"a window drops it", Params{Window: time.Hour}, zoned, Params{Algorithm: FixedWindow, Limit: 1000, Window: time.Hour}},
		{"whole", Params{Algorithm: GCRA, Limit: 7, Window: time.Second}, rule, Params{Algorithm: GCRA, Limit: 7, Window: time.Second}},
	} {
		if got := tc.p.Inherit(tc.base); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// FitValue leaves what fits alone; shows NUL as U+FFFD; cuts a long value
// at a character's edge, keeping its prefix and telling long values apart.
func TestFitValue(t *testing.T) {
	t.Parallel()
	long := "/files/" + strings.Repeat("é", 400)
	for _, v := range []string{long, "a\x00b", strings.Repeat("\x00", 300), strings.Repeat("x", 1000)} {
		for _, max := range []int{64, MaxDescriptorVal, 1024} {
			f := FitValue(v, max)
			if len(f) > max || !utf8.ValidString(f) || strings.IndexByte(f, 0) >= 0 {
				t.Errorf("FitValue(%.20q, %d) = %q", v, max, f)
			}
			if len(v) > max && !strings.HasPrefix(v, f[:min(len(f), 16)]) && strings.IndexByte(v, 0) < 0 {
				t.Errorf("FitValue(%.20q, %d) = %q lost the prefix", v, max, f)
			}
		}
	}
	if FitValue(long+"a", MaxDescriptorVal) == FitValue(long+"b", MaxDescriptorVal) {
		t.Error("two long values fitted alike")
	}
	if v := "route=/login"; FitValue(v, MaxDescriptorVal) != v {
		t.Errorf("a value that fits was changed")
	}
	if got := FitValue("a\x00b", MaxDescriptorVal); got != "a\uFFFDb" {
		t.Errorf("NUL: %q", got)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, v string
		want       bool
	}{
		{"abc", "abc", true}, {"abc", "abcd", false}, {"", "", true},
		{"user_*", "user_1", true}, {"user_*", "user_", true}, {"user_*", "use", false},
		{"*", "", true}, {"*", "anything", true},
		{"*@example.com", "bob@example.com", true}, {"*@example.com", "bob@example.org", false}, {"*@example.com", "@example.com", true},
		{"*.example.com", "example.com", false}, {"a*b*c", "abc", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false},
		{"*.example.*", "www.example.org", true}, {"*.example.*", "www.examplе.org", false}, {"**", "x", true},
		{"a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false}, {"*aab", "aaab", true}, {"a*", "b", false},
	} {
		if got := Glob(tc.pattern, tc.v); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tc.pattern, tc.v, got, tc.want)
		}
	}
}

// Every pattern of up to 6 bytes of "ab*" against every value of up to 6
// bytes of "ab": Glob answers as path.Match does (the fuzz target's
// reference), prefixes, suffixes and runs between stars overlapping and
// repeating in every way they can at that size.
func TestGlobExhaustively(t *testing.T) {
	t.Parallel()
	words := func(alphabet string, n int) []string {
		out := []string{""}
		for prev := []string{""}; n > 0; n-- {
			var next []string
			for _, w := range prev {
				for _, c := range alphabet {
					next = append(next, w+string(c))
				}
			}
			out, prev = append(out, next...), next
		}
		return out
	}
	values := words("ab", 6)
	for _, p := range words("ab*", 6) {
		for _, v := range values {
			if want, _ := path.Match(p, v); Glob(p, v) != want {
				t.Fatalf("Glob(%q, %q) = %v, path.Match says %v", p, v, !want, want)
			}
		}
	}
}

// FuzzGlob checks Glob against path.Match, whose '*' is the same when no
// '/' and no other special byte is in the way.
func FuzzGlob(f *testing.F) {
	f.Add("a*b*c", "aXbYc")
	f.Add("*@example.com", "bob@example.com")
	f.Fuzz(func(t *testing.T, pattern, v string) {
		if strings.ContainsAny(pattern+v, "/?[]\\-^") || !utf8.ValidString(pattern) || !utf8.ValidString(v) {
			return
		}
		want, err := path.Match(pattern, v)
		if err != nil {
			return
		}
		if got := Glob(pattern, v); got != want {
			t.Fatalf("Glob(%q, %q) = %v, path.Match says %v", pattern, v, got, want)
		}
	})
}
