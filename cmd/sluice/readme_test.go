package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// example is one command of the README's "Try it" section and the answer
// it shows.
type example struct{ command, answer string }

// readmeExamples reads the "## Try it" section: each ```sh block followed
// by a ```json block (the export line has none and is skipped).
func readmeExamples(t *testing.T) []example {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Try it\n")
	if start < 0 {
		t.Fatal(`README has no "## Try it" section`)
	}
	s = s[start+1:]
	if end := strings.Index(s[3:], "\n## "); end >= 0 {
		s = s[:end+3]
	}
	blocks := regexp.MustCompile("(?s)```(sh|json)\n(.*?)```").FindAllStringSubmatch(s, -1)
	var out []example
	for i := 0; i+1 < len(blocks); i++ {
		if blocks[i][1] == "sh" && blocks[i+1][1] == "json" {
			out = append(out, example{strings.TrimSpace(blocks[i][2]), strings.TrimSpace(blocks[i+1][2])})
			i++
		}
	}
	return out
}

// TestREADMECurlExamples runs the README's examples against a fresh
// `sluice dev` and checks each answer holds what the README shows.
func TestREADMECurlExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	examples := readmeExamples(t)
	if len(examples) < 5 {
		t.Fatalf("found %d examples in the README's Try it section", len(examples))
	}
	banner, stop := startDev(t, devEnv(t))
	defer func() { _ = stop() }()
	find := func(re string) string { return regexp.MustCompile(re).FindStringSubmatch(banner)[1] }
	env := append(os.Environ(), "SLUICE_SERVER="+find(`API\s+(http://\S+)`), "SLUICE_CHECK_KEY="+find(`check key\s+(\S+)`),
		"SLUICE_KEY="+find(`admin key\s+(\S+)`), "SLUICE_OPERATOR_KEY="+find(`operator key\s+(\S+)`))
	for _, ex := range examples {
		cmd := exec.Command("sh", "-c", ex.command)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: %v", ex.command, err)
			continue
		}
		var want, got any
		if err := json.Unmarshal([]byte(ex.answer), &want); err != nil {
			t.Fatalf("the README's answer to %s is not JSON: %v", ex.command, err)
		}
		if err := json.Unmarshal(out, &got); err != nil || !contains(got, want) {
			t.Errorf("%s\n answered %s\n the README shows %s", ex.command, out, ex.answer)
		}
	}
}

// contains reports whether got holds everything want does: objects by
// key, arrays element by element in any order, other values equal.
func contains(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			if gv, ok := g[k]; !ok || !contains(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok {
			return false
		}
		for _, wv := range w {
			found := false
			for _, gv := range g {
				if contains(gv, wv) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// The README is a pitch and a quick start, not a notebook: at most 150
// lines, no machine named by its ordinal, no history of the work.
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 150 {
		t.Errorf("README.md has %d lines, want at most 150", n)
	}
	if m := regexp.MustCompile(`(?i)\b(\w+(st|nd|rd|th)) machine\b|the issues' reference|this session`).FindString(string(b)); m != "" {
		t.Errorf("README.md says %q: the product as it is, not the history of the work", m)
	}
}

// The docs describe the product as it is: no machine named by its
// ordinal, no "issues' reference", and the benchmarks page at most 300
// lines of current tables.
func TestDocsHaveNoDiary(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("docs: %v %v", files, err)
	}
	diary := regexp.MustCompile(`(?i)\b(first|second|third|\w+(th|st|nd|rd)) machine\b|the issues' reference|this session`)
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := diary.FindString(string(b)); m != "" {
			t.Errorf("%s says %q", f, m)
		}
		if strings.HasSuffix(f, "benchmarks.md") && strings.Count(string(b), "\n") > 300 {
			t.Errorf("%s has %d lines, want at most 300", f, strings.Count(string(b), "\n"))
		}
	}
}
