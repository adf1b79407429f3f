package main

import (
	"flag"
	"io"
	"slices"
	"testing"
	"time"
)

// Flags are taken wherever they stand; after "--" nothing is a flag.
func TestParseArgsTakesFlagsAmongArguments(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		limit int
		pos   []string
	}{
		{[]string{"-limit", "3", "rule-id"}, 3, []string{"rule-id"}},
		{[]string{"rule-id", "-limit", "3"}, 3, []string{"rule-id"}},
		{[]string{"a=1", "-limit=4", "b=2"}, 4, []string{"a=1", "b=2"}},
		{[]string{"-limit", "5", "--", "-x=1", "-limit"}, 5, []string{"-x=1", "-limit"}},
		{[]string{"a", "--", "b"}, 0, []string{"a", "b"}},
		{nil, 0, nil},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		limit := fs.Int("limit", 0, "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || *limit != tc.limit || !slices.Equal(pos, tc.pos) {
			t.Errorf("%q: limit %d, positional %q, %v; want %d, %q", tc.args, *limit, pos, err, tc.limit, tc.pos)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseArgs(fs, []string{"id", "-nope"}); err == nil {
		t.Error("an unknown flag after an argument was taken")
	}
}

// Waits read as people read them: whole seconds past a minute, tenths
// past a second.
func TestWaitText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		13*time.Minute + 44722*time.Millisecond: "13m45s",
		2345 * time.Millisecond:                 "2.3s",
		450 * time.Millisecond:                  "450ms",
		-1:                                      "never",
	} {
		if got := waitText(d); got != want {
			t.Errorf("waitText(%v) = %q, want %q", d, got, want)
		}
	}
}
