package deploy

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/flagenv"
)

// docs/configuration.md's tables hold true of the binaries: each flag a
// binary's section lists is one of that binary's flags, and its default
// is the flag's (TestEveryFlagIsDocumented holds the other way).
func TestConfigurationDocMatchesTheFlags(t *testing.T) {
	t.Parallel()
	empty := flagenv.NewEnv(func(string) string { return "" })
	flagsOf := map[string]*flag.FlagSet{}
	{
		fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
		s := controlplane.DefaultSettings()
		s.Flags(fs, empty)
		flagsOf["controlplane"] = fs
	}
	{
		fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
		s := dataplane.DefaultSettings()
		s.Flags(fs, empty)
		flagsOf["dataplane"] = fs
	}
	{
		fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
		s := analytics.DefaultSettings()
		s.Flags(fs, empty)
		flagsOf["analytics"] = fs
	}
	doc, err := os.ReadFile(filepath.Join(root(t), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `-([a-z0-9-]+)` \\| `([A-Z0-9_]+)` \\| ([^|]*) \\|")
	rows := 0
	for _, section := range strings.Split(string(doc), "\n## ")[1:] {
		title, _, _ := strings.Cut(section, "\n")
		var binary string
		for name := range flagsOf {
			if strings.HasPrefix(title, "`"+name+"`") {
				binary = name
			}
		}
		if binary == "" {
			continue
		}
		for _, m := range row.FindAllStringSubmatch(section, -1) {
			rows++
			name, def := m[1], strings.TrimSpace(m[3])
			fl := flagsOf[binary].Lookup(name)
			if fl == nil {
				t.Errorf("configuration.md's %s section lists -%s, which %s does not define", binary, name, binary)
				continue
			}
			if !sameDefault(def, fl.DefValue) {
				t.Errorf("configuration.md: %s's -%s defaults to %s, the flag to %q", binary, name, def, fl.DefValue)
			}
		}
	}
	if rows < 50 {
		t.Fatalf("read %d rows of configuration.md: has its table layout changed?", rows)
	}
}

// sameDefault reports whether the default a row states is def, a flag's:
// "none" is the zero value; a computed one (beside another, a user's
// directory) is not compared; durations compare as durations.
func sameDefault(doc, def string) bool {
	if strings.HasPrefix(doc, "none") {
		return def == "" || def == "0" || def == "0s" || def == "false"
	}
	if strings.Contains(doc, "beside") || strings.Contains(doc, "<") || doc == "any" {
		return true
	}
	v, ok := strings.CutPrefix(doc, "`")
	if !ok {
		return false
	}
	v, _, _ = strings.Cut(v, "`")
	if v == def {
		return true
	}
	dv, err1 := time.ParseDuration(v)
	dd, err2 := time.ParseDuration(def)
	return err1 == nil && err2 == nil && dv == dd
}
