package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// example is one command of the README's "Try it" section and the answer
// it shows: JSON, or with http, a status line and headers before it.
type example struct {
	command, answer string
	http            bool
}

// readmeExamples reads the "## Try it" section: each ```sh block followed
// by a ```json or ```http block (the export line has none and is
// skipped).
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
	blocks := regexp.MustCompile("(?s)```(sh|json|http)\n(.*?)```").FindAllStringSubmatch(s, -1)
	var out []example
	for i := 0; i+1 < len(blocks); i++ {
		if blocks[i][1] == "sh" && blocks[i+1][1] != "sh" {
			out = append(out, example{strings.TrimSpace(blocks[i][2]), strings.TrimSpace(blocks[i+1][2]), blocks[i+1][1] == "http"})
			i++
		}
	}
	return out
}

// answered reports how out, a command's output, differs from ex's answer
// ("" when it holds everything the answer shows). An http answer's status
// line must match and each header it shows be there, with its value
// unless the README shows "…"; the JSON bodies are compared by contains.
func (ex example) answered(out string) string {
	wantBody, gotBody := ex.answer, out
	if ex.http {
		wantHead, wb, _ := strings.Cut(ex.answer, "\n\n")
		gotHead, gb, _ := strings.Cut(strings.ReplaceAll(out, "\r\n", "\n"), "\n\n")
		wantBody, gotBody = wb, gb
		wantLines, gotLines := strings.Split(wantHead, "\n"), strings.Split(gotHead, "\n")
		if gotLines[0] != wantLines[0] {
			return "status " + gotLines[0]
		}
		for _, w := range wantLines[1:] {
			name, value, _ := strings.Cut(w, ": ")
			if !slices.ContainsFunc(gotLines, func(g string) bool {
				gn, gv, _ := strings.Cut(g, ": ")
				return strings.EqualFold(gn, name) && (value == "…" || gv == value)
			}) {
				return "no header " + w
			}
		}
	}
	var want, got any
	if err := json.Unmarshal([]byte(wantBody), &want); err != nil {
		return "the README's answer is not JSON: " + err.Error()
	}
	if err := json.Unmarshal([]byte(gotBody), &got); err != nil || !contains(got, want) {
		return "a body without what the README shows"
	}
	return ""
}

// TestREADMECurlExamples runs the README's examples twice against one
// fresh `sluice dev`, as a reader trying them again would, and checks
// each answer holds what the README shows both times. The commands run
// where bin/sluice is this test binary, acting as the CLI.
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
	export := regexp.MustCompile(`(?m)^\s+export\s+(export .*)$`).FindStringSubmatch(banner)
	if export == nil {
		t.Fatalf("no export line in the banner:\n%s", banner)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cli := "#!/bin/sh\nSLUICE_TEST_CHILD=1 exec '" + os.Args[0] + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "bin", "sluice"), []byte(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		for _, ex := range examples {
			// The banner's export line, pasted as the README says.
			cmd := exec.Command("sh", "-c", export[1]+"\n"+ex.command)
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("round %d: %s: %v", round, ex.command, err)
				continue
			}
			if why := ex.answered(string(out)); why != "" {
				t.Errorf("round %d: %s\n answered %s\n (%s)\n the README shows %s", round, ex.command, out, why, ex.answer)
			}
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
