package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The decider's protocols are packages of their own over the decision
// service and the shared HTTP and gRPC plumbing: none imports another,
// and neither the service nor the plumbing imports any of them.
func TestNoTransportImportsAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/sluicehq/sluice/internal/"
	transports := []string{"checkapi", "envoyrls", "gubernator", "unkey", "proxy"}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for _, pkg := range append([]string{"decision", "follower", "httpcheck", "grpcserve"}, transports...) {
		d := deps(pkg)
		for _, other := range transports {
			if other != pkg && slices.Contains(d, mod+other) {
				t.Errorf("%s imports %s", pkg, other)
			}
		}
	}
}

// The decision service is the one door: no protocol, nor the HTTP and
// gRPC plumbing, names the decider (a Service's Decider field, or
// decide's Decider and its constructors). What they need of it, the
// service offers, counted and traced.
func TestProtocolsGoThroughTheDecisionService(t *testing.T) {
	dirs := []string{"checkapi", "envoyrls", "gubernator", "unkey", "proxy", "httpcheck", "grpcserve"}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, _ := sel.X.(*ast.Ident)
				switch {
				case sel.Sel.Name == "Decider":
					t.Errorf("%s: %s names the decider; go through decision.Service", fset.Position(sel.Pos()), sel.Sel.Name)
				case pkg != nil && pkg.Name == "decide" && (sel.Sel.Name == "New" || sel.Sel.Name == "NewDecider"):
					t.Errorf("%s: decide.%s makes a decider; protocols are given the decision service", fset.Position(sel.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
}

// Each binary links only what it runs: the analytics consumer no Redis
// client and no decider, the control plane no decider, no Redis client
// and no fasthttp. A package outside a binary's list fails here; add it
// to the list only when the binary runs it.
func TestEachBinaryLinksWhatItRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/sluicehq/sluice/"
	internal := func(names ...string) []string {
		for i, n := range names {
			names[i] = mod + "internal/" + n
		}
		return names
	}
	base := internal("policy", "limit", "flagenv", "telemetry", "tlsfiles", "redact", "prune", "gen/sluice/v1")
	allowed := map[string][]string{
		"cmd/analytics": slices.Concat(base, internal("kafkasec", "analytics"), []string{mod + "migrations"}),
		"cmd/controlplane": slices.Concat(base, internal("authguard", "clientip", "envoyimport", "kongimport", "days", "route", "tenantfile",
			"auditdiff", "pgstore", "protoconv", "reports", "tenantapply", "tracing", "unkeywire", "controlplane", "secretfile",
			"gen/sluice/v1/sluicev1connect"), []string{mod + "migrations", mod + "web"}),
	}
	forbidden := []string{"github.com/redis/go-redis/v9", "github.com/valyala/fasthttp", mod + "internal/decide", mod + "internal/decision"}
	for bin, ok := range allowed {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+bin).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", bin, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if slices.Contains(forbidden, dep) {
				t.Errorf("%s links %s", bin, dep)
			}
			if strings.HasPrefix(dep, mod) && dep != mod+bin && !slices.Contains(ok, dep) {
				t.Errorf("%s links %s, which is not on its list", bin, dep)
			}
		}
	}
}
