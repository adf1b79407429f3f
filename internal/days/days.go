// Package days reads durations as time.ParseDuration does, and also in
// days, as people write long ones: "30d", "1d12h", "-2d". A day is 24
// hours here, whatever the clocks do that day.
package days

import (
	"errors"
	"flag"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is 24 hours.
const Day = 24 * time.Hour

// ParseDuration reads s: an optional sign, then whole days ("30d")
// followed by what time.ParseDuration reads ("1d12h30m"), or what it
// reads alone ("90m").
func ParseDuration(s string) (time.Duration, error) {
	i := strings.IndexByte(s, 'd')
	if i < 0 {
		return time.ParseDuration(s)
	}
	bad := errors.New("time: invalid duration " + strconv.Quote(s))
	num, rest := s[:i], s[i+1:]
	neg := false
	if num != "" && (num[0] == '-' || num[0] == '+') {
		neg, num = num[0] == '-', num[1:]
	}
	if num == "" || strings.ContainsAny(num, "+-") {
		return 0, bad
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > uint64(math.MaxInt64/int64(Day)) {
		return 0, bad
	}
	d := time.Duration(n) * Day
	if rest != "" {
		if strings.ContainsAny(rest[:1], "+-") {
			return 0, bad
		}
		r, err := time.ParseDuration(rest)
		if err != nil || r > math.MaxInt64-d {
			return 0, bad
		}
		d += r
	}
	if neg {
		d = -d
	}
	return d, nil
}

// Format writes d as people write it, and as ParseDuration reads it back:
// whole days as days ("7d"), else Go's form without its zero units ("1m",
// not "1m0s"; "2h", not "2h0m0s"; "1m30s", "250ms").
func Format(d time.Duration) string {
	if d > 0 && d%Day == 0 {
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	}
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// value is a flag.Value of a duration that ParseDuration reads.
type value struct{ d *time.Duration }

func (v value) String() string {
	if v.d == nil {
		return ""
	}
	return Format(*v.d)
}

func (v value) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return errors.New("parse error: want a duration such as 90s, 15m, 24h or 30d")
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	*v.d = d
	return nil
}

// Flag defines a duration flag on fs, as fs.Duration does, that also
// takes days and refuses a negative duration (none of Sluice's means
// anything: a negative -for would have made an override that never
// expires).
func Flag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(value{&d}, name, usage)
	return &d
}
