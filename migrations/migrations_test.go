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

// A server older than the migrations need is refused by name, not by the
// first function a migration misses.
func TestTooOldAServerIsNamed(t *testing.T) {
	if err := tooOld(130012, "13.12 (Debian 13.12-1)"); err == nil || !strings.Contains(err.Error(), "PostgreSQL 14 or later is needed; the server is 13.12") {
		t.Fatalf("PostgreSQL 13: %v", err)
	}
	for _, v := range []int{140000, 150019, 170002} {
		if err := tooOld(v, ""); err != nil {
			t.Fatalf("%d: %v", v, err)
		}
	}
}
