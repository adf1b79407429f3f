package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every fuzz target runs in `make fuzz`, in its package: a decoder's
// fuzz target left out of it is never run for longer than its seeds.
func TestEveryFuzzTargetRunsInMakeFuzz(t *testing.T) {
	dir := root(t)
	makefile, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\t([\w/]+):(Fuzz\w+)\b`).FindAllStringSubmatch(string(makefile), -1) {
		listed[m[1]+" "+m[2]] = true
	}
	target := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(dir, filepath.Dir(path))
		for _, m := range target.FindAllStringSubmatch(string(src), -1) {
			found++
			if !listed[filepath.ToSlash(pkg)+" "+m[1]] {
				t.Errorf("%s (%s) is not run by make fuzz", m[1], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no fuzz targets found")
	}
}

// Every package of a test that calls cputest.Alone runs in make test's
// second pass, alone on the machine: beside another package's test
// binary, a test held to a latency budget fails for a load it never set.
func TestEveryAloneTestRunsAlone(t *testing.T) {
	dir := root(t)
	makefile, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ALONE = (.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("no ALONE in the Makefile")
	}
	alone := map[string]bool{}
	for _, p := range strings.Fields(string(m[1])) {
		alone[p] = true
	}
	found := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.Contains(path, "/interop/") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), "cputest.Alone(") {
			return nil
		}
		found++
		if pkg, _ := filepath.Rel(dir, filepath.Dir(path)); !alone[filepath.ToSlash(pkg)] {
			t.Errorf("%s calls cputest.Alone but its package is not in the Makefile's ALONE", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no test calls cputest.Alone")
	}
}
