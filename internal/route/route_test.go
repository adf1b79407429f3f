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

func TestFold(t *testing.T) {
	for in, want := range map[string]string{
		"/": "/", "/login": "/login", "/Login/": "/login", "//LOGIN": "/login", "/api/": "/api", "/Api/V1/./": "/api/v1",
		"/ÉTÉ/": "/été", "*": "*",
	} {
		if got := Fold(in); got != want {
			t.Errorf("Fold(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Fold("/api/v1/users") }); n != 0 {
		t.Fatalf("%v allocations for a folded path", n)
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{
		"shop.example": "shop.example", "Shop.Example:8443": "shop.example", "shop.example.": "shop.example",
		"[::1]:80": "::1", "[::1]": "::1", "192.0.2.1:8080": "192.0.2.1", "": "", "[2001:DB8::1]": "2001:db8::1",
	} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Host("api.example.com:443") }); n != 0 {
		t.Fatalf("%v allocations for a host in lower case", n)
	}
}

// FuzzNormalize checks what any path's route is: one spelling (normalizing
// it again changes nothing), with no empty, "." or ".." segment, and the
// trailing slash of the path (unless it is the root); and that its folded
// route is one spelling too, in lower case, without a trailing slash.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/", "/login", "//a/./b/../c/", "/..", "*", "/a//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		// Fold: one spelling too, in lower case, with no trailing slash.
		if fp := Fold(p); Fold(fp) != fp || strings.HasPrefix(p, "/") && (strings.ToLower(fp) != fp || fp != "/" && strings.HasSuffix(fp, "/")) {
			t.Fatalf("Fold(%q) = %q (folded again %q)", p, fp, Fold(fp))
		}
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
