package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
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
	for _, pkg := range append([]string{"decision", "follower", "httpport", "grpcserve"}, transports...) {
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
	dirs := []string{"checkapi", "envoyrls", "gubernator", "unkey", "proxy", "httpport", "grpcserve"}
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

// Errors map to answers through one table (policy.Code.Status, read by
// protoconv): no file outside those two names a gRPC or Connect code, or
// builds a Connect error or a gRPC status by hand. HTTP statuses of the
// HTTP layer's own refusals (a malformed request, a body too large) are
// not codes of the domain and stay where they are made. The clients (the
// CLI, the SDK, the load generator) read the codes of answers they get,
// and are not held to it.
func TestOneErrorTable(t *testing.T) {
	root := filepath.Join("..", "..")
	table := map[string]bool{
		filepath.Join(root, "internal", "policy", "errors.go"):    true,
		filepath.Join(root, "internal", "protoconv", "errors.go"): true,
	}
	var files []string
	clients := map[string]bool{"sluice": true, "sluice-bench": true, "cli": true, "grpcload": true}
	for _, dir := range []string{"cmd", "internal", "web"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && (d.Name() == "gen" || d.Name() == "testdata" || clients[d.Name()]):
				return filepath.SkipDir
			case !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !table[path]:
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, file := range files {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{} // local name: import path, of the libraries with codes
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if path != "connectrpc.com/connect" && path != "google.golang.org/grpc/codes" && path != "google.golang.org/grpc/status" {
				continue
			}
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = path
		}
		if len(names) == 0 {
			continue
		}
		f, err = parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			var bad bool
			switch names[pkg.Name] {
			case "connectrpc.com/connect":
				bad = name == "NewError" || strings.HasPrefix(name, "Code") && name != "CodeOf" && name != "Code"
			case "google.golang.org/grpc/codes":
				bad = name != "Code"
			case "google.golang.org/grpc/status":
				bad = name == "Error" || name == "Errorf" || name == "New" || name == "Newf"
			}
			if bad {
				t.Errorf("%s: %s.%s: map a policy.Code through protoconv (Error, GRPCError, ToConnectError) instead", fset.Position(sel.Pos()), pkg.Name, name)
			}
			return true
		})
	}
}

// Rooms stay small: no source file (generated and test files aside) over
// 600 lines, and no package over 2,000 lines of Go without its tests,
// but for the exceptions docs/architecture.md names with their reasons.
func TestNoLargeRooms(t *testing.T) {
	root := filepath.Join("..", "..")
	fileExceptions := map[string]bool{"web/static/app.js": true}
	packageExceptions := map[string]bool{"internal/redisengine": true, "internal/controlplane": true, "cmd/sluice": true,
		"internal/pgstore": true, "internal/decide": true}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range fileExceptions {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/architecture.md does not name %s, an exception to the size of a file", name)
		}
	}
	for name := range packageExceptions {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/architecture.md does not name %s, an exception to the size of a package", name)
		}
	}
	perPackage := map[string]int{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "gen", "testdata", "interop", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if strings.HasSuffix(path, "_test.go") || (ext != ".go" && ext != ".js" && ext != ".lua") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := strings.Count(string(b), "\n")
		if n > 600 && !fileExceptions[rel] {
			t.Errorf("%s is %d lines, over 600: split it by what it does", rel, n)
		}
		if ext == ".go" {
			perPackage[filepath.ToSlash(filepath.Dir(rel))] += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, n := range perPackage {
		if n > 2000 && !packageExceptions[pkg] {
			t.Errorf("package %s is %d lines of Go without its tests, over 2,000", pkg, n)
		}
	}
}

// docs/architecture.md names every package (generated code aside), so
// that a newcomer finds each on the map.
func TestTheMapNamesEveryPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "github.com/sluicehq/sluice/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "/internal/gen/") || pkg == "github.com/sluicehq/sluice/internal/testkit" {
			continue
		}
		if name := filepath.Base(pkg); !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/architecture.md does not name %s", pkg)
		}
	}
}
