package policy

import (
	"strings"
	"testing"
)

// Glob at its worst: long values (MaxDescriptorVal bytes) and patterns
// whose literals almost match everywhere, as a tenant's rules and
// overrides may hold for every request of a shared decider to try.
func BenchmarkGlob(b *testing.B) {
	long := strings.Repeat("a", MaxDescriptorVal)
	for _, bc := range []struct{ name, pattern, v string }{
		{"prefix", "user_*", "user_42"},
		{"suffix", "*@example.com", "ann@example.com"},
		{"inside", "*.example.*", "api.example.com"},
		{"suffix-worst", "*" + strings.Repeat("a", 100) + "b", long},
		{"stars-worst", strings.Repeat("*a", 60) + "*b", long},
		{"stars-inside-worst", strings.Repeat("*a", 60) + "*b*", long},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				Glob(bc.pattern, bc.v)
			}
		})
	}
}
