package decider

import (
	"os/exec"
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
