package web_test

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Signing in with an admin or a viewer key makes no call that fails: no
// refused ListTenants, no missing favicon, nothing in red in the
// browser's console. The header names the tenant, and the try panel holds
// the dev tenant's check key.
func TestSignInWithoutErrors(t *testing.T) {
	exe := chromium(t)
	banner := stack(t)
	find := func(re string) string { return regexp.MustCompile(re).FindStringSubmatch(banner)[1] }
	console := find(`console\s+(\S+)`)
	check := find(`check key\s+(\S+)`)
	for _, who := range []struct{ name, key string }{{"admin", find(`admin key\s+(\S+)`)}, {"viewer", find(`viewer key\s+(\S+)`)}} {
		t.Run(who.name, func(t *testing.T) {
			ctx := browser(t, exe, time.Minute)

			var mu sync.Mutex
			var failed []string
			var icon bool // the favicon's answer has come
			events := chromedp.Events(ctx, network.ResponseReceived)
			go func() {
				for ev, err := range events {
					if err != nil {
						return
					}
					if ev.Response == nil {
						continue
					}
					mu.Lock()
					if ev.Response.Status >= 400 {
						failed = append(failed, fmt.Sprintf("%d %s", ev.Response.Status, ev.Response.URL))
					}
					icon = icon || strings.Contains(ev.Response.URL, "favicon")
					mu.Unlock()
				}
			}()
			if err := chromedp.Do(ctx, chromedp.Navigate(console), chromedp.WaitVisible("#signin-key"),
				chromedp.SendKeys("#signin-key", who.key+"\r"), chromedp.WaitVisible("#view-rules")); err != nil {
				t.Fatalf("sign in: %v", err)
			}
			// The rules have loaded (the view's first table), and the favicon.
			deadline := time.Now().Add(20 * time.Second)
			for {
				n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#tiers table, #tiers section, #tiers [data-tier]').length`))
				if err == nil && n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the rules never showed")
				}
				time.Sleep(50 * time.Millisecond)
			}
			role, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.role`))
			if err != nil || role != who.name {
				t.Fatalf("role %q (%v), want %s", role, err, who.name)
			}
			name, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#signed-in-tenant').textContent`))
			if err != nil || !strings.HasPrefix(name, "demo (") {
				t.Errorf("the header names the tenant %q (%v), want demo (…)", name, err)
			}
			for { // filled once the control plane answers the try key
				got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#try-key').value`))
				if err == nil && got == check {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the try panel's check key is %q (%v), want the dev check key", got, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for seen := false; !seen; time.Sleep(20 * time.Millisecond) { // the favicon, asked once the page is idle
				mu.Lock()
				seen = icon
				mu.Unlock()
				if time.Now().After(deadline) {
					t.Fatal("the browser never asked for a favicon")
				}
			}
			// An empty table says so.
			empty, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const b = document.querySelector('#audit-table tbody');
				const rows = [...b.children]; b.replaceChildren(); const c = getComputedStyle(b, '::before').content; b.replaceChildren(...rows); return c; })()`))
			if err != nil || !strings.Contains(empty, "No change yet") {
				t.Errorf("an empty audit table shows %q (%v), want it to say it is empty", empty, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(failed) > 0 {
				t.Errorf("signing in with the %s key, calls failed: %v", who.name, failed)
			}
		})
	}
}
