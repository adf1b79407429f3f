package migrations

import (
	"strings"
	"testing"
)

// Apply refuses a malformed URL without quoting its password (golang-
// migrate's own error quotes the URL whole): what the control plane and
// analytics print at start.
func TestApplyKeepsAPasswordOutOfItsErrors(t *testing.T) {
	for _, u := range []string{"postgres://u:s3cretpw@127.0.0.1:bad/db", "postgresql://u:s3cretpw@127.0.0.1:5432/%zz"} {
		err := Apply(u)
		if err == nil {
			t.Fatalf("%s: applied", u)
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Fatalf("%s: the password shows: %v", u, err)
		}
	}
}
