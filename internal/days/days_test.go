package days

import (
	"flag"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * Day, "1d12h": Day + 12*time.Hour, "1d12h30m": Day + 12*time.Hour + 30*time.Minute, "0d": 0,
		"-2d": -2 * Day, "+1d": Day, "-1d6h": -(Day + 6*time.Hour), "90m": 90 * time.Minute, "1.5h": 90 * time.Minute, "0": 0,
		"106751d": 106751 * Day,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1.5d", "d1h", "1dd", "1d-1h", "1d+1h", "--1d", "-+1d", "1parsec", "x1d", "1d1", "106752d", "106751d24h", "1 d"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(new(testWriter))
	since := Flag(fs, "since", 24*time.Hour, "")
	if *since != 24*time.Hour {
		t.Fatalf("default %v", *since)
	}
	if err := fs.Parse([]string{"-since", "7d"}); err != nil || *since != 7*Day {
		t.Fatalf("-since 7d: %v, %v", *since, err)
	}
	if err := fs.Parse([]string{"-since", "7 days"}); err == nil {
		t.Fatal("-since '7 days' taken")
	}
	if err := fs.Parse([]string{"-since", "-1h"}); err == nil || *since != 7*Day {
		t.Fatalf("-since -1h: %v, %v", *since, err)
	}
}

type testWriter struct{}

func (*testWriter) Write(p []byte) (int, error) { return len(p), nil }

// FuzzParseDuration: never panics; what it reads without a 'd' is what
// time.ParseDuration reads; days add up to their hours.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30d", "1d12h", "-2d", "90m", "1dd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		for i := range len(s) {
			if s[i] == 'd' {
				if h, herr := time.ParseDuration(s[:i] + "h"); herr == nil && len(s) == i+1 && h*24 != d {
					t.Fatalf("%q = %v, want %v", s, d, h*24)
				}
				return
			}
		}
		if want, werr := time.ParseDuration(s); werr != nil || want != d {
			t.Fatalf("%q = %v, time.ParseDuration says %v, %v", s, d, want, werr)
		}
	})
}

// Format writes what ParseDuration reads back, days as days.
func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{7 * Day: "7d", Day: "1d", 36 * time.Hour: "36h", time.Minute: "1m", 90 * time.Second: "1m30s",
		2 * time.Hour: "2h", 250 * time.Millisecond: "250ms", 0: "0s", -Day: "-24h"} {
		got := Format(d)
		if got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(got); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}
