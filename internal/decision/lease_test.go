package decision

import "testing"

func TestLeaseIDFitsLua(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"a", "job-42", "\xff\xff"} {
		if id := LeaseID(s); id < 0 || id >= 1<<53 || id == LeaseID(s+"x") {
			t.Fatalf("LeaseID(%q) = %d", s, id)
		}
	}
}
