package policy

import (
	"strings"
	"testing"
)

// Every code has its answer in the one table, and no two codes that
// clients must tell apart share one.
func TestEveryCodeHasAStatus(t *testing.T) {
	seen := map[Status]Code{}
	for c := CodeUnknown; c <= CodeFailedPrecondition; c++ {
		s := c.Status()
		if s.RPC == 0 || s.HTTP < 400 || strings.HasPrefix(c.String(), "code(") {
			t.Errorf("%v: %+v, want a status and a name", c, s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("%v and %v both answer %+v", c, other, s)
		}
		seen[s] = c
	}
	if got := Code(200).Status(); got != CodeUnknown.Status() {
		t.Errorf("a code outside the table answers %+v, want an internal error's", got)
	}
}
