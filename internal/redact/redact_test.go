package redact

import (
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
)

// No password of a URL survives in an error about it, whatever its
// shape; and the error still unwraps to the original.
func TestError(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"redis://u:s3cret@host:bad", "s3cret"},
		{"postgres://u:s3cret@127.0.0.1:5432/db?sslmode=zzz", "s3cret"},
		{"redis://:s3cret@host:6379/%zz", "s3cret"},
		{"redis://u:pa/s3cret@host:6379", "pa/s3cret"},     // '/' unescaped
		{"redis://u:pa@s3cret@host:6379", "pa@s3cret"},     // '@' unescaped
		{"redis://u:p%40s3cret@host:6379/%zz", "p@s3cret"}, // escaped, and quoted decoded
	} {
		_, perr := url.Parse(tc.url)
		if perr == nil {
			perr = errors.New("dial " + tc.url + " and " + strings.ReplaceAll(tc.url, "%40", "@") + ": refused")
		}
		err := Error(perr, tc.url)
		if strings.Contains(err.Error(), tc.secret) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error %q shows the password", tc.url, err)
		}
		if !errors.Is(err, perr) {
			t.Errorf("%s: the redacted error does not unwrap to the original", tc.url)
		}
		if strings.Contains(URL(tc.url), "s3cret") {
			t.Errorf("URL(%q) = %q shows the password", tc.url, URL(tc.url))
		}
	}
	// Nothing to hide: the error itself.
	if err := Error(io.EOF, "redis://host:6379"); err != io.EOF {
		t.Fatalf("Error without a password gave %v", err)
	}
	if Error(nil, "redis://u:p@h") != nil {
		t.Fatal("Error(nil) is not nil")
	}
	if got := URL("redis://u:p@host:6379/0"); got != "redis://u:xxxxx@host:6379/0" {
		t.Fatalf("URL = %q", got)
	}
}

// FuzzError: no URL's password (what lies between the first ':' after
// "://" and the last '@') is left in an error that quotes the URL, nor
// in URL's rendering of it.
func FuzzError(f *testing.F) {
	for _, s := range []string{"redis://u:secret@host:6379", "postgres://:a%zz@h/db", "x://u:p@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		pw := secrets(u)
		if len(pw) == 0 || len(pw[0]) < 4 || strings.ContainsRune(pw[0], 'x') {
			// Short passwords can occur by chance in the rest of the text,
			// and one holding an 'x' can be spelt again by the mask and the
			// text beside it ("x000" in "xxxxx000" of a host "x000000").
			return
		}
		err := Error(errors.New("parse "+u+": bad"), u)
		if strings.Contains(err.Error(), pw[0]) {
			t.Fatalf("password %q left in %q", pw[0], err)
		}
		// URL is url's own redaction of a URL it parses, and shows nothing
		// after the scheme of one it cannot.
		if p, err := url.Parse(u); err == nil {
			if URL(u) != p.Redacted() {
				t.Fatalf("URL(%q) = %q, want %q", u, URL(u), p.Redacted())
			}
		} else if _, after, _ := strings.Cut(URL(u), "://"); strings.Contains(after, pw[0]) {
			t.Fatalf("URL(%q) = %q shows the password", u, URL(u))
		}
	})
}
