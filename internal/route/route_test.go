package route

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"/": "/", "/login": "/login", "/api/": "/api/", "//login": "/login", "/./login": "/login",
		"/a/../login": "/login", "/../login": "/login", "/api//v1//": "/api/v1/", "/api/v1/.": "/api/v1",
		"/api/./": "/api/", "/a/..": "/", "*": "*", "": "",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
	// A clean path, what nearly every request has, costs nothing.
	if n := testing.AllocsPerRun(100, func() { _, _ = Normalize("/api/v1/users"), Normalize("/api/v1/") }); n != 0 {
		t.Fatalf("%v allocations for clean paths", n)
	}
}

// FuzzNormalize checks what any path's route is: one spelling (normalizing
// it again changes nothing), with no empty, "." or ".." segment, and the
// trailing slash of the path (unless it is the root).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/", "/login", "//a/./b/../c/", "/..", "*", "/a//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r := Normalize(p)
		if Normalize(r) != r {
			t.Fatalf("Normalize(%q) = %q, which normalizes to %q", p, r, Normalize(r))
		}
		if !strings.HasPrefix(p, "/") {
			if r != p {
				t.Fatalf("Normalize(%q) = %q, want it unchanged", p, r)
			}
			return
		}
		if r != "/" && strings.HasSuffix(p, "/") != strings.HasSuffix(r, "/") {
			t.Fatalf("Normalize(%q) = %q: the trailing slash changed", p, r)
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(r, "/"), "/")
		if inner == "" {
			return
		}
		for seg := range strings.SplitSeq(inner, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("Normalize(%q) = %q keeps the segment %q", p, r, seg)
			}
		}
	})
}
