package controlplane

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The store seam: the control plane's calls and tenantapply use the
// interfaces they declare; only the assembly (settings.go: Serve and
// OnPostgres) names pgstore.
func TestOnlyTheAssemblyNamesTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const pgstore = `"github.com/sluicehq/sluice/internal/pgstore"`
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "settings.go" {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			if imp.Path.Value == pgstore {
				t.Errorf("%s imports pgstore: declare the store methods it needs in store.go", f)
			}
		}
	}
	for _, pkg := range []string{"tenantapply", "protoconv", "policy", "decide", "decision"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/sluicehq/sluice/internal/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		if slices.Contains(strings.Fields(string(out)), strings.Trim(pgstore, `"`)) {
			t.Errorf("%s imports pgstore", pkg)
		}
	}
}
