package web_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/web"
)

// No form of the console can put a secret in a URL: each one, submitted
// in Chromium with scripts off (before the page's script attaches, or
// never), sends what it holds in a POST body, not a query string, and
// the address bar, history and proxies' logs see none of it.
func TestFormsSendNoSecretInAURL(t *testing.T) {
	exe := chromium(t)
	srv := httptest.NewServer(web.Handler(web.Options{}))
	defer srv.Close()
	page, err := os.ReadFile(filepath.Join("static", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	forms := regexp.MustCompile(`<form [^>]*id="([^"]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(forms) < 10 {
		t.Fatalf("%d forms found in the console", len(forms))
	}

	// Page scripts off, as before the console's script attaches.
	ctx := browser(t, exe, 2*time.Minute, chromedp.Flag("blink-settings", "scriptEnabled=false"))

	const secret = "sk_admin_secretmarker"
	for _, f := range forms {
		id := f[1]
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+web.Prefix), chromedp.WaitReady("body")); err != nil {
			t.Fatalf("%s: open the console: %v", id, err)
		}
		if ran, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!window.sluiceConsoleLoaded`)); err == nil && ran {
			t.Fatal("the console's script ran: scripts are not off")
		}
		// DevTools (not the page) shows the form's view and fills each of
		// its text fields with the secret; Enter in the first submits it.
		fill := `(() => {
			const f = document.getElementById(` + "`" + id + "`" + `);
			for (let e = f; e; e = e.parentElement) e.hidden = false;
			for (const e of f.querySelectorAll('[hidden]')) e.hidden = false;
			let first = null;
			for (const i of f.querySelectorAll('input, textarea')) {
				if (['hidden', 'checkbox', 'radio', 'file', 'number', 'date', 'datetime-local'].includes(i.type)) continue;
				i.value = '` + secret + `';
				if (i.tagName === 'INPUT') first = first || i; // Enter in a textarea is a new line
			}
			document.body.dataset.before = 'submit'; // gone once the answer's page replaces it
			// Enter in the first field, else a click on the submit button.
			const target = first || f.querySelector('button[type=submit], button:not([type])');
			target.id ||= 'submit-me';
			return (first ? 'enter:#' : 'click:#') + target.id;
		})()`
		target, err := chromedp.Run(ctx, chromedp.EvaluateAsDevTools[string](fill))
		if err != nil {
			t.Fatalf("%s: fill: %v", id, err)
		}
		how, sel, _ := strings.Cut(target, ":")
		var submit error
		if how == "enter" {
			submit = chromedp.Do(ctx, chromedp.Focus(sel), chromedp.KeyEvent("\r"))
		} else { // no field to press Enter in: the submit button's own submission
			_, submit = chromedp.Run(ctx, chromedp.EvaluateAsDevTools[bool](`(document.getElementById(`+"`"+id+"`"+`).requestSubmit(), true)`))
		}
		if err := submit; err != nil {
			t.Fatalf("%s: submit: %v", id, err)
		}
		// The answer's page in place of the console's: the submission is done.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			done, err := chromedp.Run(ctx, chromedp.EvaluateAsDevTools[bool](`document.readyState === 'complete' && !(document.body && document.body.dataset.before)`))
			if err == nil && done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the form was not submitted", id)
			}
		}
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatalf("%s: location: %v", id, err)
		}
		if strings.Contains(loc, "secretmarker") || strings.Contains(loc, "?") {
			t.Errorf("form %s, submitted with scripts off, went to %s", id, loc)
		}
	}
}
