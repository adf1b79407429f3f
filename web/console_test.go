package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/devstack"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/devtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// chromium finds the browser: $SLUICE_CHROMIUM, else Debian's chromium.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("SLUICE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	t.Skip("no Chromium: apt-get install -y chromium (.ci/run does)")
	return ""
}

// browser starts Chromium at exe (headless, no sandbox, no GPU, no
// background networking, 1280×900, and flags more) until the test ends,
// and returns its context, ended after timeout. Chromium takes the
// machine's CPU: a browser test runs alone among those that hold a decider
// to its budget (cputest).
func browser(t *testing.T, exe string, timeout time.Duration, flags ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	cputest.Alone(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1280, 900)), flags...)...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// artifacts is where screenshots go: $SLUICE_ARTIFACTS, else .artifacts/
// at the repository root.
func artifacts(t *testing.T) string {
	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", ".artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stack runs the whole system in process (devstack) on a fresh schema, a
// key prefix and an embedded Kafka, and returns its banner.
func stack(t *testing.T) string {
	t.Helper()
	_, prefix := redistest.Client(t)
	banner, _ := devtest.Start(t, func(ctx context.Context, out io.Writer) error {
		return devstack.Run(ctx, devstack.Config{Addr: "127.0.0.1:0", DatabaseURL: pgtest.Schema(t), RedisURL: "redis://" + redistest.Addr(t),
			RedisPrefix: prefix, Dir: t.TempDir(), DeltaInterval: 100 * time.Millisecond, Region: "eu-west", Out: out})
	})
	return banner
}

func TestConsoleInABrowser(t *testing.T) {
	exe := chromium(t)
	shots := artifacts(t)
	banner := stack(t)
	find := func(re string) string { return regexp.MustCompile(re).FindStringSubmatch(banner)[1] }
	console, adminKey, checkKey := find(`console\s+(\S+)`), find(`admin key\s+(\S+)`), find(`check key\s+(\S+)`)
	operatorKey := find(`operator key\s+(\S+)`)

	ctx := browser(t, exe, 3*time.Minute)

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		var s string
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	shot := func(name string) {
		t.Helper()
		b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// waitText polls (with the test's deadline) until sel's text contains want.
	waitText := func(sel, want string, each func()) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := eval(`(document.querySelector(` + jsString(sel) + `) || {}).textContent || ''`)
			if strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never showed %q (has %q)", sel, want, got)
			}
			if each != nil {
				each()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// waitJS polls (with the test's deadline) until js evaluates to want.
	waitJS := func(js, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for got := eval(js); got != want; got = eval(js) {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %q, never %q", js, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	api := strings.TrimSuffix(console, "/console/")

	// Sign in with the keyboard: type the key, press Enter.
	do("open the console", chromedp.Navigate(console), chromedp.WaitVisible("#signin-key"))
	shot("01-sign-in")
	do("sign in", chromedp.SendKeys("#signin-key", adminKey+"\r"), chromedp.WaitVisible("#view-rules"))
	waitText("#tiers", "Tier free", nil)

	// Every input, select and textarea has a label.
	if unlabeled := eval(`Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea')).filter(e => !e.labels || e.labels.length === 0).map(e => e.id).join(',')`); unlabeled != "" {
		t.Fatalf("inputs without a label: %s", unlabeled)
	}

	// A tier, then a rule that is invalid, then a valid one.
	do("create a tier", chromedp.SendKeys("#tier-name", "gold"), chromedp.Click("#tier-form button[type=submit]"))
	waitText("#tiers", "Tier gold", nil)
	eval(`(() => { const s = document.querySelector('#rule-tier'); s.value = [...s.options].find(o => o.text === 'gold').value; return ''; })()`)
	do("an invalid rule", chromedp.SendKeys("#rule-name", "tiny"), chromedp.SetValue("#rule-algorithm", "ALGORITHM_FIXED_WINDOW"),
		chromedp.SetValue("#rule-limit", "0"), chromedp.SetValue("#rule-window", "1m"), chromedp.SetValue("#rule-sync", "5ms"),
		chromedp.Click("#rule-submit"))
	waitText(`[data-error-for="limit"]`, "must be", nil)
	waitText(`[data-error-for="sync"]`, "must be 0 (strict)", nil)
	if eval(`document.querySelector('#rule-limit').getAttribute('aria-invalid') || ''`) != "true" {
		t.Fatal("the invalid limit input is not marked invalid")
	}
	shot("02-field-error")
	// A malformed duration shows next to its input, as a field error, and
	// not as a decoder's message under the form.
	do("a malformed window", chromedp.SetValue("#rule-limit", "2"), chromedp.SetValue("#rule-sync", "0s"),
		chromedp.SetValue("#rule-window", "abc"), chromedp.Click("#rule-submit"))
	waitText(`[data-error-for="window"]`, "a duration such as", nil)
	if got := eval(`document.querySelector('#rule-error').textContent`); strings.Contains(got, "unmarshal") || strings.Contains(got, "proto") {
		t.Fatalf("a malformed window's error under the form: %q", got)
	}
	do("the window again", chromedp.SetValue("#rule-window", "1m"))
	do("a valid rule, counted locally", chromedp.SetValue("#rule-limit", "2"), chromedp.SetValue("#rule-sync", "50ms"),
		chromedp.SetValue("#rule-message", "Gold plans make 2 calls a minute"), chromedp.Click("#rule-submit"))
	waitText(`[data-tier="gold"]`, "tiny", nil)
	waitText(`[data-tier="gold"]`, "local, synced every 50ms", nil)
	waitText("#status", "Created rule tiny", nil)

	// Every algorithm's parameters have a field: a monthly quota (a
	// calendar window) and a concurrency limit (a lease lifetime, no
	// window), both only for requests of a route the checks below do not
	// send; an edit keeps what the form does not show in the table.
	gold := func() {
		eval(`(() => { const s = document.querySelector('#rule-tier'); s.value = [...s.options].find(o => o.text === 'gold').value; return ''; })()`)
	}
	gold()
	do("choose a fixed window", chromedp.SetValue("#rule-algorithm", "ALGORITHM_FIXED_WINDOW"))
	eval(`(document.querySelector('#rule-algorithm').dispatchEvent(new Event('change')), '')`)
	// The form shows the chosen algorithm's parameters alone.
	if shown := eval(`['#rule-calendar', '#rule-window', '#rule-burst', '#rule-lease-ttl', '#rule-warm-up'].map((s) => document.querySelector(s).offsetParent !== null).join(',')`); shown != "true,true,false,false,false" {
		t.Fatalf("fields shown for a fixed window (calendar, window, burst, lease, warm-up): %s", shown)
	}
	do("a monthly quota", chromedp.SetValue("#rule-name", "quota"),
		chromedp.SetValue("#rule-limit", "1000"), chromedp.SetValue("#rule-calendar", "CALENDAR_MONTH"), chromedp.SetValue("#rule-match", "route=/reports"),
		chromedp.Click("#rule-submit"))
	waitText(`[data-rule="quota"]`, "1000 per calendar month", nil)
	eval(`(() => { [...document.querySelectorAll('[data-rule="quota"] button')].find((b) => b.textContent === 'Edit').click(); return ''; })()`)
	do("edit the quota", chromedp.SetValue("#rule-limit", "2000"), chromedp.Click("#rule-submit"))
	waitText("#status", "Saved rule quota", nil)
	waitText(`[data-rule="quota"]`, "2000 per calendar month", nil)
	// Two editors: the form holds the quota as it was read; a change saved
	// meanwhile (through the API) is not overwritten, and the console says
	// what happened and shows the newer state.
	eval(`(() => { [...document.querySelectorAll('[data-rule="quota"] button')].find((b) => b.textContent === 'Edit').click(); return ''; })()`)
	changeRule(t, api, adminKey, "gold", "quota", func(p *sluicev1.LimitParams) { p.Limit = 3000 })
	do("save over a newer change", chromedp.SetValue("#rule-limit", "2500"), chromedp.Click("#rule-submit"))
	waitText("#rule-error", "someone else changed it since you opened it", nil)
	waitText(`[data-rule="quota"]`, "3000 per calendar month", nil)
	do("leave the edit", chromedp.Click("#rule-cancel"))
	// A daily quota from midnight in New York: an unknown zone is refused
	// next to its field.
	eval(`(() => { [...document.querySelectorAll('[data-rule="quota"] button')].find((b) => b.textContent === 'Edit').click(); return ''; })()`)
	do("a daily quota in an unknown zone", chromedp.SetValue("#rule-calendar", "CALENDAR_DAY"), chromedp.SetValue("#rule-time-zone", "America/Gotham"), chromedp.Click("#rule-submit"))
	waitText(`[data-error-for="time_zone"]`, "unknown time zone", nil)
	do("a known zone", chromedp.SetValue("#rule-time-zone", "America/New_York"), chromedp.Click("#rule-submit"))
	waitText(`[data-rule="quota"]`, "3000 per calendar day (America/New_York)", nil)
	gold()
	do("a concurrency limit", chromedp.SetValue("#rule-name", "inflight"), chromedp.SetValue("#rule-algorithm", "ALGORITHM_CONCURRENCY"),
		chromedp.SetValue("#rule-limit", "5"), chromedp.SetValue("#rule-lease-ttl", "30s"), chromedp.SetValue("#rule-match", "route=/reports"),
		chromedp.Click("#rule-submit"))
	waitText("#status", "Created rule inflight", nil)
	waitText(`[data-rule="inflight"]`, "concurrency", nil)
	// An adaptive limit shared between plans: shares over 1 are refused
	// next to their field, then the rule shows its range.
	gold()
	do("an adaptive limit", chromedp.SetValue("#rule-name", "backend"), chromedp.SetValue("#rule-algorithm", "ALGORITHM_ADAPTIVE_CONCURRENCY"))
	eval(`(document.querySelector('#rule-algorithm').dispatchEvent(new Event('change')), '')`)
	do("its parameters", chromedp.SetValue("#rule-limit", "200"), chromedp.SetValue("#rule-window", "1s"), chromedp.SetValue("#rule-lease-ttl", "30s"),
		chromedp.SetValue("#rule-match", "route=/backend"), chromedp.SetValue("#rule-partition-by", "plan"), chromedp.SetValue("#rule-partitions", "big=0.8, small=0.4"),
		chromedp.Click("#rule-submit"))
	waitText(`[data-error-for="partitions"]`, "over 1", nil)
	do("shares that fit", chromedp.SetValue("#rule-partitions", "big=0.6, small=0.3"), chromedp.Click("#rule-submit"))
	waitText(`[data-rule="backend"]`, "1 to 200 in flight, adapted every 1s", nil)

	// The try panel, until a check is rejected (the new rule reaches the
	// decider through the config watch within moments).
	do("fill the try panel", chromedp.SetValue("#try-key", checkKey), chromedp.SetValue("#try-client", "eve"), chromedp.SetValue("#try-tier", "gold"))
	waitText("#try-result", "429: rejected", func() { do("check", chromedp.Click("#try-submit")) })
	if h := eval(`document.querySelector('#try-result .headers').textContent`); !strings.Contains(h, "Retry-After") || !strings.Contains(h, `"tiny"`) {
		t.Fatalf("the rejection's headers: %q", h)
	}
	waitText("#try-result", `"detail": "Gold plans make 2 calls a minute"`, nil) // the rule's message
	shot("03-rules-and-try")

	// Reset eve's counters: her next check is admitted.
	do("reset", chromedp.Click("#try-reset"))
	waitText("#try-result", "Reset: tiny", nil)
	do("check after the reset", chromedp.Click("#try-submit"))
	waitText("#try-result", "200: allowed", nil)
	// Other descriptors meet the rules that match them: /reports's.
	do("another descriptor", chromedp.SetValue("#try-more", "route=/reports, method=GET"), chromedp.Click("#try-submit"))
	waitText("#try-result .headers", `"inflight"`, nil)
	eval(`(() => { document.querySelector('#try-more').value = ''; return ''; })()`)

	// Blocked: a client the rule never saw is rejected at once, with a
	// limit of 0 and no Retry-After (it never can be admitted).
	for _, label := range []string{"Block", "Confirm block"} { // asked twice
		eval(`(() => { [...document.querySelectorAll('[data-rule="tiny"] button')].find((b) => b.textContent === '` + label + `').click(); return ''; })()`)
	}
	waitText(`[data-rule="tiny"]`, "blocked", nil)
	do("a new client", chromedp.SetValue("#try-client", "zed"))
	waitText("#try-result .headers", "X-RateLimit-Limit: 0", func() { do("check", chromedp.Click("#try-submit")) })
	if h := eval(`document.querySelector('#try-result .headers').textContent`); strings.Contains(h, "Retry-After") {
		t.Fatalf("a blocked client's headers: %q", h)
	}
	// A request naming no client is rejected too; the dashboard says so.
	eval(`(() => { document.querySelector('#try-client').value = ''; return ''; })()`)
	do("check with no client", chromedp.Click("#try-submit"))

	// The rejection reaches the dashboard (decider → Kafka → analytics → reports).
	do("open the dashboard", chromedp.Click(`#nav button[data-view="dashboard"]`), chromedp.WaitVisible("#view-dashboard"))
	waitText("#top-table", "eve", func() { do("refresh", chromedp.Click("#refresh")) })
	waitText("#top-table", "(no identifier given)", func() { do("refresh", chromedp.Click("#refresh")) })
	waitText("#rule-table", "tiny", nil)
	waitText("#region-table", "eu-west", nil) // the decider's -region
	shot("04-dashboard")
	// A rule of a 40-character name (the README's gubernator example makes
	// one) wraps in the "By rule" card: its numbers stay in view.
	eval(`(() => { const r = document.querySelector('#rule-table tbody tr').cloneNode(true);
		r.cells[0].textContent = 'limit/token_bucket/1s/requests_per_sec_x';
		document.querySelector('#rule-table tbody').append(r); return ''; })()`)
	if got := eval(`(() => { const s = document.querySelector('#rule-table').closest('.scroll');
		return s.scrollWidth <= s.clientWidth + 1 ? 'fits' : 'clipped ' + s.scrollWidth + ' > ' + s.clientWidth; })()`); got != "fits" {
		t.Errorf("the By rule card with a 40-character rule name: %s", got)
	}
	shot("04-dashboard-long-rule-name")
	// A week: steps of whole hours from a whole hour (which the server
	// reads from its hourly rollups), dated on the chart.
	do("a week", chromedp.SetValue("#range", "604800"), chromedp.Click("#refresh"))
	if got := eval(`(() => { const r = range(); return r.step + ' ' + r.from.slice(13); })()`); got != "10800s :00:00.000Z" {
		t.Fatalf("a week's step and start %q, want 3 hours from a whole hour", got)
	}
	waitText("#top-table", "eve", nil)
	waitText("#chart", time.Now().Format("Jan"), nil)
	shot("04b-dashboard-week")
	// A year, as far back as the top clients' days are kept: 146-hour steps.
	eval(`(() => { document.querySelector('#top-table tbody').replaceChildren(); return ''; })()`)
	do("a year", chromedp.SetValue("#range", "31536000"), chromedp.Click("#refresh"))
	if got := eval(`range().step`); got != "525600s" {
		t.Fatalf("a year's step %q, want 146 hours", got)
	}
	waitText("#top-table", "eve", nil)
	// A custom range, in local time: the last hour has eve, a day a year
	// ago no one; one that ends before it starts, and one longer than the
	// server answers, say so next to their inputs.
	eval(`(() => { const r = document.querySelector('#range'); r.value = 'custom'; r.dispatchEvent(new Event('change')); return ''; })()`)
	do("the custom range's inputs", chromedp.WaitVisible("#range-from"), chromedp.WaitVisible("#range-to"))
	setRange := func(from, to string) {
		t.Helper()
		eval(`(() => { document.querySelector('#range-from').value = localInput(new Date(` + from + `));
			document.querySelector('#range-to').value = localInput(new Date(` + to + `)); return ''; })()`)
		do("apply the range", chromedp.Click("#refresh"))
	}
	eval(`(() => { document.querySelector('#top-table tbody').replaceChildren(); return ''; })()`)
	topRows := `String(document.querySelectorAll('#top-table tbody tr').length)`
	setRange("Date.now() - 3600e3", "Date.now() + 60e3")
	waitText("#top-table", "eve", nil)
	setRange("Date.now()", "Date.now() - 3600e3")
	waitText("#range-to-error", "must end after it starts", nil)
	waitJS(topRows, "0") // not the last hour's figures under another range
	setRange("Date.now() - 366 * 86400e3", "Date.now() - 365 * 86400e3")
	waitText("#status", "Updated", nil)
	waitJS(topRows+` + ' ' + document.querySelector('#range-to-error').textContent`, "0 ")
	setRange("Date.now() - 401 * 86400e3", "Date.now()")
	waitText("#range-to-error", "at most 400 days", nil)
	if got := eval(`document.querySelector('#range-to').getAttribute('aria-invalid') || ''`); got != "true" {
		t.Fatalf("the range's end after the server refused it: aria-invalid %q", got)
	}
	shot("04c-dashboard-custom-range")
	setRange("Date.now() - 3600e3", "Date.now() + 60e3")
	waitText("#top-table", "eve", nil)
	if got := eval(`document.querySelector('#range-to-error').textContent`); got != "" {
		t.Fatalf("the range's error after a good range: %q", got)
	}
	// From a rejected client to its override: the top table offers one for
	// the rule eve hit (it counts per client_id), the form filled in with
	// her id, the rule and its limit, the limit to change in focus.
	do("override eve's tiny", chromedp.Click(`#top-table button[aria-label="Override tiny for eve"]`), chromedp.WaitVisible("#view-access"))
	waitJS(`[document.querySelector('#ov-identifier').value, (document.querySelector('#ov-rule').selectedOptions[0] || {}).text,
		document.querySelector('#ov-limit').value, document.querySelector('#ov-window').value, document.activeElement.id].join(' ')`, "eve gold / tiny 2 1m ov-limit")
	do("raise eve's limit", chromedp.SetValue("#ov-limit", "50"), chromedp.Click("#ov-submit"))
	waitText("#status", "Created an override for eve", nil)
	if o := overrideOf(t, api, adminKey, "eve"); o.GetParams().GetLimit() != 50 || o.GetRuleId() == "" {
		t.Fatalf("eve's override: %v", o)
	}

	// (pro/per-client, 100 a minute, now 20 at once, for a raised limit below)
	changeRule(t, api, adminKey, "pro", "per-client", func(p *sluicev1.LimitParams) { p.Burst = 20 })

	// Keys: a new key's secret is shown once; one that expires in 30 days
	// says when.
	do("keys", chromedp.Click(`#nav button[data-view="access"]`), chromedp.WaitVisible("#view-access"),
		chromedp.SendKeys("#key-name", "ci"), chromedp.Click("#key-form button[type=submit]"))
	waitText("#key-secret", "sk_check_", nil)
	// Rotated (asked twice): a new secret, the old key working on for a day.
	first := eval(`document.querySelector('#new-secret').textContent`)
	do("rotate ci", chromedp.Click(`button[aria-label="Rotate key ci"]`), chromedp.Click(`button[aria-label="Rotate key ci"]`))
	waitText("#key-secret", "works until", nil)
	if second := eval(`document.querySelector('#new-secret').textContent`); second == first || !strings.HasPrefix(second, "sk_check_") {
		t.Fatalf("the rotated secret %q (was %q)", second, first)
	}
	do("a trial key", chromedp.SetValue("#key-name", "trial"), chromedp.SetValue("#key-expires", "30d"), chromedp.Click("#key-form button[type=submit]"))
	trialExpires := `([...document.querySelectorAll('#keys-table tbody tr')].find((r) => r.cells[0].textContent === 'trial') || {cells: []}).cells[6]?.textContent || ''`
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := eval(trialExpires)
		if got != "" && got != "never" && strings.Contains(got, time.Now().Add(30*24*time.Hour).Format("2006")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trial key's expiry shows as %q", got)
		}
	}
	// Revoked, the trial key leaves the list, unless revoked keys are asked
	// for.
	keyNames := `[...document.querySelectorAll('#keys-table tbody tr')].map((r) => r.cells[0].textContent + (r.cells[5].textContent === '–' ? '' : ' (revoked)')).join(',')`
	eval(`(() => { [...[...document.querySelectorAll('#keys-table tbody tr')].find((r) => r.cells[0].textContent === 'trial').querySelectorAll('button')].find((b) => b.textContent === 'Revoke').click(); return ''; })()`)
	waitText("#status", "Revoked trial", nil)
	waitJS(`String(`+keyNames+`.includes('trial'))`, "false")
	do("show revoked keys", chromedp.Click("#keys-revoked"))
	waitJS(`String(`+keyNames+`.includes('trial (revoked)'))`, "true")
	do("hide revoked keys", chromedp.Click("#keys-revoked"))

	// Overrides: a client blocked for a day (after an unreadable expiry),
	// then rejected in the try panel by the block.
	do("an override with a bad expiry", chromedp.SendKeys("#ov-identifier", "mallory"), chromedp.Click("#ov-block"),
		chromedp.SendKeys("#ov-expires", "soon"), chromedp.Click("#override-form button[type=submit]"))
	waitText(`[data-error-for="expires_at"]`, "a duration", nil)
	do("block mallory for a day", chromedp.SetValue("#ov-expires", "24h"), chromedp.Click("#override-form button[type=submit]"))
	waitText("#overrides-table", "blocked", nil)
	// An address blocked: its identifier found in another descriptor than
	// client_id (a name that cannot be one refused next to its field).
	do("block an address, under a malformed descriptor", chromedp.SetValue("#ov-identifier", "10.0.0.7"), chromedp.SetValue("#ov-descriptor", "bad key"),
		chromedp.Click("#ov-block"), chromedp.Click("#ov-submit"))
	waitText(`[data-error-for="descriptor_key"]`, "may contain only", nil)
	do("block the address", chromedp.SetValue("#ov-descriptor", "ip"), chromedp.Click("#ov-submit"))
	waitText("#status", "Created an override for 10.0.0.7", nil)
	waitText("#overrides-table", "ip=10.0.0.7", nil)
	if o := overrideOf(t, api, adminKey, "10.0.0.7"); o.GetDescriptorKey() != "ip" || !o.GetBlock() {
		t.Fatalf("the address's override: %v", o)
	}
	// A raised limit: choosing the rule fills in its limit and window; the
	// override keeps the rule's algorithm, its burst raised alike.
	eval(`(() => { const s = document.querySelector('#ov-rule'); s.value = [...s.options].find(o => o.text === 'pro / per-client').value; s.dispatchEvent(new Event('change')); return ''; })()`)
	if got := eval(`document.querySelector('#ov-limit').value + ' per ' + document.querySelector('#ov-window').value`); got != "100 per 1m" {
		t.Fatalf("the rule chosen fills in %q", got)
	}
	do("raise partner's limit", chromedp.SendKeys("#ov-identifier", "partner"), chromedp.SetValue("#ov-limit", "1000"), chromedp.Click("#ov-submit"))
	waitText("#status", "Created an override for partner", nil)
	waitText("#overrides-table", "pro / per-client", nil) // its rule by tier and name: free has a per-client rule too
	if p := overrideOf(t, api, adminKey, "partner").GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET ||
		p.GetLimit() != 1000 || p.GetBurst() != 200 || p.GetWindow().AsDuration() != time.Minute {
		t.Fatalf("partner's raised limit: %v", p)
	}
	// Edited, its limit halved: the control plane completes the rest from
	// the override's own parameters, the burst halved alike.
	do("edit partner's override", chromedp.Click(`#overrides-table button[aria-label="Edit the override of partner"]`))
	if got := eval(`document.querySelector('#ov-limit').value + ' per ' + document.querySelector('#ov-window').value`); got != "1000 per 1m" {
		t.Fatalf("partner's override in the form: %q", got)
	}
	do("halve partner's limit", chromedp.SetValue("#ov-limit", "500"), chromedp.Click("#ov-submit"))
	waitText("#status", "Saved the override of partner", nil)
	if p := overrideOf(t, api, adminKey, "partner").GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET ||
		p.GetLimit() != 500 || p.GetBurst() != 100 || p.GetWindow().AsDuration() != time.Minute {
		t.Fatalf("partner's halved limit: %v", p)
	}
	// A burst of its own, given in the form: kept as given.
	do("edit partner's override again", chromedp.Click(`#overrides-table button[aria-label="Edit the override of partner"]`))
	if got := eval(`document.querySelector('#ov-burst').placeholder`); got != "now 100" {
		t.Fatalf("the burst field's placeholder: %q", got)
	}
	do("partner's own burst", chromedp.SetValue("#ov-burst", "7"), chromedp.Click("#ov-submit"))
	waitText("#status", "Saved the override of partner", nil)
	waitText("#overrides-table", "500 per 1m, burst 7 (token bucket)", nil)
	if p := overrideOf(t, api, adminKey, "partner").GetParams(); p.GetLimit() != 500 || p.GetBurst() != 7 {
		t.Fatalf("partner's own burst: %v", p)
	}
	// Another algorithm: the form's parameters whole (a sliding window has
	// no burst); without a window, refused next to the parameters.
	do("edit partner's algorithm", chromedp.Click(`#overrides-table button[aria-label="Edit the override of partner"]`),
		chromedp.SetValue("#ov-algorithm", "ALGORITHM_SLIDING_WINDOW"), chromedp.SetValue("#ov-limit", "300"))
	eval(`(document.querySelector('#ov-window').value = '', '')`)
	do("save without a window", chromedp.Click("#ov-submit"))
	waitText(`#override-form [data-error-for="params"]`, "must be between", nil)
	do("with a window", chromedp.SetValue("#ov-window", "1m"), chromedp.Click("#ov-submit"))
	waitText("#status", "Saved the override of partner", nil)
	waitText("#overrides-table", "300 per 1m (sliding window)", nil)
	if p := overrideOf(t, api, adminKey, "partner").GetParams(); p.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_SLIDING_WINDOW || p.GetLimit() != 300 || p.GetBurst() != 0 {
		t.Fatalf("partner's sliding window: %v", p)
	}
	// Many overrides come a page at a time, and a client's is found by the
	// prefix of its id.
	blockMany(t, api, adminKey, "bulk-", 120)
	rows := `String(document.querySelectorAll('#overrides-table tbody tr').length) + (document.querySelector('#ov-more').hidden ? '' : '+')`
	do("find bulk-", chromedp.SetValue("#ov-prefix", "bulk-"), chromedp.Click("#ov-find button[type=submit]"))
	waitJS(rows, "100+")
	do("more", chromedp.Click("#ov-more"))
	waitJS(rows, "120")
	do("find mall", chromedp.SetValue("#ov-prefix", "mall"), chromedp.Click("#ov-find button[type=submit]"))
	waitJS(rows, "1")
	waitText("#overrides-table", "mallory", nil)
	do("back to the try panel", chromedp.Click(`#nav button[data-view="rules"]`), chromedp.WaitVisible("#view-rules"),
		chromedp.SetValue("#try-client", "mallory"))
	eval(`(() => { document.querySelector('#try-tier').value = ''; return ''; })()`)
	waitText("#try-result", `"blocked"`, func() { do("check", chromedp.Click("#try-submit")) })
	do("keys again", chromedp.Click(`#nav button[data-view="access"]`), chromedp.WaitVisible("#view-access"))
	waitJS(`document.querySelector('#view-access').getAttribute('aria-busy')`, "false")
	// An override changed in place: mallory's block becomes a move to gold.
	do("edit mallory's override", chromedp.Click(`#overrides-table button[aria-label="Edit the override of mallory"]`))
	if got := eval(`document.querySelector('#ov-submit').textContent + ',' + document.querySelector('#ov-block').checked`); got != "Save override,true" {
		t.Fatalf("the override form to edit mallory's: %s", got)
	}
	do("unblock mallory", chromedp.Click("#ov-block"), chromedp.SetValue("#ov-tier", "gold"), chromedp.Click("#ov-submit"))
	waitText("#status", "Saved the override of mallory", nil)
	waitJS(`[...document.querySelectorAll('#overrides-table tbody tr')].map((r) => r.cells[0].textContent + ':' + r.cells[1].textContent + ':' + r.cells[3].textContent).join(' ')`, "mallory:gold:–")
	do("audit", chromedp.Click(`#nav button[data-view="audit"]`))
	waitText("#audit-table", "override", nil)
	// Each entry says what it changed; a rule's history is its entries
	// alone, from its creation with a limit of 2.
	waitText("#audit-table", "tier: gold", nil)
	do("tiny's history", chromedp.Click(`#nav button[data-view="rules"]`))
	waitJS(`document.querySelector('#view-rules').getAttribute('aria-busy')`, "false")
	do("tiny's history", chromedp.Click(`button[aria-label="History of tiny"]`))
	waitText("#audit-of-name", "rule gold / tiny", nil)
	waitText("#audit-table", "limit: 2", nil)
	waitText("#audit-table", "dev admin (sk_admin_", nil)
	shot("07-rule-history")
	if got := eval(`String(new Set([...document.querySelectorAll('#audit-table tbody tr')].map((r) => r.cells[3].textContent)).size)`); got != "1" {
		t.Fatalf("tiny's history holds %s resources", got)
	}
	// Entries name the rule by its name, not its id.
	if got := eval(`[...document.querySelectorAll('#audit-table tbody tr')].map((r) => r.cells[3].textContent).join('|')`); !strings.Contains(got, "rule tiny") || regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-`).MatchString(got) {
		t.Fatalf("tiny's history names it %q, want its name", got)
	}
	do("every change", chromedp.Click("#audit-all"))
	waitText("#audit-table", "override", nil)

	// The tenant file: loaded, edited, a dry run listing the change, a
	// field error by its path, then applied.
	do("tenant file", chromedp.Click(`#nav button[data-view="file"]`), chromedp.WaitVisible("#view-file"))
	fileValue := `document.querySelector('#file-content').value`
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(eval(fileValue), "name: tiny"); {
		if time.Now().After(deadline) {
			t.Fatalf("the tenant file never loaded: %q", eval(fileValue))
		}
		time.Sleep(50 * time.Millisecond)
	}
	setLimit := func(n string) {
		t.Helper()
		eval(`(() => { const a = document.querySelector('#file-content'); a.value = a.value.replace(/(name: tiny[\s\S]*?limit: )\d+/, '$1` + n + `'); return a.value; })()`)
	}
	setLimit("3")
	waitText("#file-changes", "would update rule gold/tiny", func() { do("dry run", chromedp.Click("#file-dry")) })
	setLimit("0")
	waitText("#file-error", "].limit", func() { do("dry run of an invalid file", chromedp.Click("#file-dry")) })
	shot("05b-tenant-file")
	setLimit("3")
	do("apply", chromedp.Click("#file-apply"))
	waitText("#status", "Applied 1 change as config version", nil)
	waitText("#file-changes", "update rule gold/tiny", nil)

	// Another limiter's configuration imported: a Kong file's plugins, a
	// refusal by its path, a dry run listing the rules and the notes, then
	// the import, which the tenant file then shows.
	kongFile := "services:\n  - name: orders\n    routes: [{name: orders, paths: [/orders, /v2/orders]}]\n" +
		"    plugins: [{name: rate-limiting, config: {minute: 3, limit_by: header, header_name: X-Device}}]\n"
	setImport := func(text string) {
		t.Helper()
		eval(`(() => { document.querySelector('#import-content').value = ` + strconv.Quote(text) + `; return ''; })()`)
	}
	do("a Kong file into gold", chromedp.SetValue("#import-format", "IMPORT_FORMAT_KONG"), chromedp.SetValue("#import-tier", "gold"))
	setImport(strings.Replace(kongFile, "limit_by: header", "limit_by: cookie", 1))
	waitText("#import-error", "contents[0].services[0].plugins[0].config.limit_by", func() { do("an invalid import", chromedp.Click("#import-dry")) })
	setImport(kongFile)
	waitText("#import-changes", "would be created: service-orders-minute", func() { do("a dry run of the import", chromedp.Click("#import-dry")) })
	waitText("#import-changes", "-descriptor-headers x-device=X-Device", nil)
	shot("05d-import")
	do("import", chromedp.Click("#import-apply"))
	waitText("#status", "Imported into tenant demo, tier gold", nil)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(eval(fileValue), "name: service-orders-minute"); {
		if time.Now().After(deadline) {
			t.Fatalf("the tenant file never showed the imported rule: %q", eval(fileValue))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Usable at 390px: no view wider than the screen (tables scroll in
	// their cards).
	for _, w := range []int64{390, 1280} {
		do("resize", chromedp.EmulateViewport(w, 844))
		for _, view := range []string{"rules", "access", "dashboard", "audit", "file"} {
			do("the "+view+" view", chromedp.Click(`#nav button[data-view="`+view+`"]`))
			waitJS(`document.querySelector('#view-`+view+`').getAttribute('aria-busy')`, "false") // its rows are replaced until then
			if view == "rules" {
				waitText("#tiers", "Tier gold", nil)
			}
			if over := eval(`String(document.documentElement.scrollWidth > window.innerWidth + 1)`); over != "false" {
				t.Errorf("at %dpx the %s view scrolls sideways (scrollWidth %s): %s", w, view, eval(`String(document.documentElement.scrollWidth)`),
					eval(`Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ':' + Math.round(e.getBoundingClientRect().right)).join(' ')`))
			}
			if w == 390 && view != "audit" {
				shot("05-" + view + "-390px")
			}
		}
	}
	// The chart, drawn as wide as it shows, is drawn again when the window
	// narrows (auto-refresh off: not by the next refresh).
	do("the dashboard", chromedp.Click(`#nav button[data-view="dashboard"]`))
	waitJS(`document.querySelector('#view-dashboard').getAttribute('aria-busy')`, "false")
	do("no auto-refresh", chromedp.Click("#auto-refresh"))
	waitJS(`String(document.querySelector('#chart svg').viewBox.baseVal.width > 1000)`, "true")
	do("narrow the window", chromedp.EmulateViewport(390, 844))
	waitJS(`String(document.querySelector('#chart svg').viewBox.baseVal.width < 400)`, "true")
	do("widen it, auto-refresh on", chromedp.EmulateViewport(1280, 844), chromedp.Click("#auto-refresh"))
	do("back to the rules", chromedp.Click(`#nav button[data-view="rules"]`))
	waitJS(`document.querySelector('#view-rules').getAttribute('aria-busy')`, "false")

	// A tier an override moves a client to cannot be deleted (asked
	// twice, then refused); renamed, the override follows it. An empty
	// tier is deleted.
	do("delete gold", chromedp.Click(`button[aria-label="Delete tier gold"]`))
	waitText(`button[aria-label="Delete tier gold"]`, "Confirm: delete tier gold and its rules", nil)
	do("confirm", chromedp.Click(`button[aria-label="Delete tier gold"]`))
	waitText("#status", "Failed: tier gold is the tier of 1 override(s) (mallory)", nil)
	do("rename gold", chromedp.Click(`button[aria-label="Rename tier gold"]`), chromedp.WaitVisible(".tier-rename input"))
	if got := eval(`document.activeElement.id.startsWith('rename-') + ':' + document.querySelector('.tier-rename label').textContent`); got != "true:New name of tier gold" {
		t.Fatalf("the rename form: %s", got)
	}
	do("to platinum", chromedp.SetValue(".tier-rename input", "platinum"), chromedp.Click(".tier-rename button[type=submit]"))
	waitText("#status", "Renamed tier gold to platinum", nil)
	waitText("#tiers", "Tier platinum", nil)
	if o := overrideOf(t, api, adminKey, "mallory"); o.GetTier() != "platinum" {
		t.Fatalf("mallory's override after the rename: %v", o)
	}
	do("create a tier to delete", chromedp.SendKeys("#tier-name", "temp"), chromedp.Click("#tier-form button[type=submit]"))
	waitText("#tiers", "Tier temp", nil)
	do("delete temp", chromedp.Click(`button[aria-label="Delete tier temp"]`), chromedp.Click(`button[aria-label="Delete tier temp"]`))
	waitText("#status", "Deleted tier temp", nil)
	waitJS(`String(document.querySelector('#tiers').textContent.includes('Tier temp'))`, "false")

	// An analyst's viewer key: the rules, the overrides, the dashboard and
	// every history, and nothing that would change them; no keys.
	viewerKey := createKey(t, api, adminKey, sluicev1.KeyKind_KEY_KIND_VIEWER)
	do("sign in as a viewer", chromedp.Click("#sign-out"), chromedp.WaitVisible("#signin-key"),
		chromedp.SendKeys("#signin-key", viewerKey+"\r"), chromedp.WaitVisible("#view-rules"))
	waitText("#role", "viewer (read only)", nil)
	waitJS(`document.querySelector('#view-rules').getAttribute('aria-busy')`, "false")
	waitText("#tiers", "Tier platinum", nil)
	shown := `(sel) => [...document.querySelectorAll(sel)].filter((e) => e.offsetParent !== null)`
	if got := eval(`(() => { const shown = ` + shown + `; return shown('#tiers button').map((b) => b.textContent).join(',') + '|' + shown('#rule-form, #tier-form').length; })()`); !regexp.MustCompile(`^History(,History)*\|0$`).MatchString(got) {
		t.Fatalf("a viewer's rules view offers (buttons|forms): %s", got)
	}
	do("a viewer's overrides", chromedp.Click(`#nav button[data-view="access"]`))
	waitJS(`document.querySelector('#view-access').getAttribute('aria-busy')`, "false")
	waitText("#overrides-table", "bulk-000", nil)
	if got := eval(`(() => { const shown = ` + shown + `; return shown('#overrides-table button').map((b) => b.textContent).join(',') + '|' + shown('#keys-section, #override-form').length + '|' + document.querySelector('#status').textContent; })()`); !regexp.MustCompile(`^History(,History)*\|0\|$`).MatchString(got) {
		t.Fatalf("a viewer's overrides view offers (buttons|forms|status): %s", got)
	}
	shot("05c-viewer")
	do("a viewer's dashboard", chromedp.Click(`#nav button[data-view="dashboard"]`))
	waitJS(`document.querySelector('#view-dashboard').getAttribute('aria-busy')`, "false")
	waitText("#status", "Updated", nil) // its reports loaded
	waitText("#top-table", "eve", nil)
	// mallory's rejections by her block (no rule of the tenant's), named so.
	waitText("#rule-table", "blocked (client_id=mallory)", func() { do("refresh", chromedp.Click("#refresh")) })
	if got := eval(`String(document.querySelectorAll('#top-table button').length)`); got != "0" {
		t.Fatalf("a viewer's top clients offer %s buttons", got)
	}
	do("a viewer's tenant file", chromedp.Click(`#nav button[data-view="file"]`), chromedp.WaitVisible("#view-file"))
	if got := eval(`(() => { const shown = ` + shown + `; return String(shown('#file-dry, #file-apply, .file-prune, #import-form').length); })()`); got != "0" {
		t.Fatalf("a viewer's tenant file view offers %s ways to change the tenant", got)
	}

	// The operator: tenants, and the decider with the version it enforces.
	// A sidecar of demo's (its check key) pulls once and no more: it falls
	// behind demo's changes below.
	sidecar := connect.NewRequest(&sluicev1.GetSnapshotsRequest{Decider: "sidecar-1"})
	sidecar.Header().Set("Authorization", "Bearer "+checkKey)
	pulled, err := sluicev1connect.NewConfigServiceClient(http.DefaultClient, api).GetSnapshots(context.Background(), sidecar)
	if err != nil || len(pulled.Msg.Snapshots) != 1 {
		t.Fatalf("the sidecar's pull: %v, %v", pulled, err)
	}
	createTenants(t, api, operatorKey, "shop-", 105)
	do("sign out", chromedp.Click("#sign-out"), chromedp.WaitVisible("#signin-key"),
		chromedp.SendKeys("#signin-key", operatorKey+"\r"), chromedp.WaitVisible(`#nav button[data-view="operator"]`),
		chromedp.Click(`#nav button[data-view="operator"]`))
	waitText("#tenants-table", "demo", nil)
	waitText("#deciders-table", "demo: v", nil)
	waitText("#deciders-table", " s ago)", nil) // when each last synced, for how long it has not
	waitText("#deciders-table", "closed", nil)  // its Redis breaker, as it reported it
	// At 1280px the operator's header (the sections, the tenant picker,
	// the role and sign out) stays one row.
	if h, _ := strconv.Atoi(eval(`String(Math.round(document.querySelector('header.top').getBoundingClientRect().height))`)); h > 70 {
		t.Errorf("the operator's header is %dpx high at 1280px: it wraps", h)
	}
	shot("06-operator")
	// A tenant into shadow mode and out again, as the table (reloaded from
	// the API after each) shows.
	demoVersion := func() string {
		return eval(`[...document.querySelectorAll('#tenants-table tbody tr')].find((r) => r.cells[0].textContent === 'demo').cells[6].textContent`)
	}
	before := demoVersion()
	do("shadow on", chromedp.Click(`#tenants-table button[aria-label^="Shadow mode for demo:"]`))
	waitText("#tenants-table", "On: rejects nothing", nil)
	// A change of the tenant is a new config version, shown in its row.
	if v, err := strconv.Atoi(strings.TrimPrefix(before, "v")); err != nil || demoVersion() != fmt.Sprintf("v%d", v+1) {
		t.Fatalf("demo's config version %s before shadow mode, %s after", before, demoVersion())
	}
	do("shadow off", chromedp.Click(`#tenants-table button[aria-label^="Shadow mode for demo:"]`))
	waitText("#tenants-table", "Off", nil)
	// The sidecar is two versions behind now, and listed so; the decider
	// of sluice dev, on the watch, is not (once it has pulled).
	v := pulled.Msg.Snapshots[0].Version
	behind := `[...document.querySelectorAll('#deciders-table tbody tr')].filter((r) => r.cells[3].textContent.includes('behind'))
		.map((r) => r.cells[0].textContent.split(' ')[0] + ' ' + r.cells[3].textContent).join('; ')`
	want := fmt.Sprintf("sidecar-1 demo: v%d (behind: v%d)", v, v+2)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		do("the operator's view again", chromedp.Click(`#nav button[data-view="operator"]`))
		got := eval(behind)
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deciders listed as behind: %q, want %q", got, want)
		}
	}
	// Many tenants come a page at a time, found by a slug prefix; the one
	// worked on stays in the picker whatever a search finds.
	tenantRows := `String(document.querySelectorAll('#tenants-table tbody tr').length) + (document.querySelector('#tenant-more').hidden ? '' : '+')`
	waitJS(tenantRows, "100+")
	do("more tenants", chromedp.Click("#tenant-more"))
	waitJS(tenantRows, "106")
	do("find shop-10", chromedp.SetValue("#tenant-prefix", "shop-10"), chromedp.Click("#tenant-find button[type=submit]"))
	waitJS(`[...document.querySelectorAll('#tenants-table tbody tr')].map((r) => r.cells[0].textContent).join(' ') + '|' + [...document.querySelectorAll('#tenant-select option')].map((o) => o.textContent.split(' ')[0]).join(' ')`,
		"shop-100 shop-101 shop-102 shop-103 shop-104|demo shop-100 shop-101 shop-102 shop-103 shop-104")
	// A tenant suspended and resumed; another deleted, asked twice.
	tenantRow := func(slug string) string {
		return `([...document.querySelectorAll('#tenants-table tbody tr')].find((r) => r.cells[0].textContent === '` + slug + `') || {cells: [0, 0, 0, {textContent: 'gone'}]}).cells[3].textContent`
	}
	do("suspend shop-100", chromedp.Click(`button[aria-label="Suspend tenant shop-100"]`))
	waitJS(tenantRow("shop-100"), "suspended: checks refused")
	do("resume shop-100", chromedp.Click(`button[aria-label="Resume tenant shop-100"]`))
	waitJS(tenantRow("shop-100"), "active")
	do("delete shop-101", chromedp.Click(`button[aria-label="Delete tenant shop-101"]`))
	waitText(`button[aria-label="Delete tenant shop-101"]`, "Confirm", nil)
	do("confirm", chromedp.Click(`button[aria-label="Delete tenant shop-101"]`))
	waitJS(tenantRow("shop-101"), "gone")
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{SlugPrefix: "shop-10"})
	req.Header().Set("Authorization", "Bearer "+operatorKey)
	if res, err := sluicev1connect.NewTenantServiceClient(http.DefaultClient, api).ListTenants(context.Background(), req); err != nil || len(res.Msg.Tenants) != 4 ||
		res.Msg.Tenants[0].Status != sluicev1.TenantStatus_TENANT_STATUS_ACTIVE || res.Msg.Tenants[1].Slug != "shop-102" {
		t.Fatalf("tenants shop-10…: %v, %v", res, err)
	}
}

// createTenants creates n tenants, prefix000 and on, through the API.
func createTenants(t *testing.T, api, operatorKey, prefix string, n int) {
	t.Helper()
	tenants := sluicev1connect.NewTenantServiceClient(http.DefaultClient, api)
	for i := range n {
		req := connect.NewRequest(&sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: fmt.Sprintf("%s%03d", prefix, i), Name: "Shop"}})
		req.Header().Set("Authorization", "Bearer "+operatorKey)
		if _, err := tenants.CreateTenant(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// createKey creates a key of kind through the API and returns its secret.
func createKey(t *testing.T, api, adminKey string, kind sluicev1.KeyKind) string {
	t.Helper()
	req := connect.NewRequest(&sluicev1.CreateKeyRequest{Kind: kind, Name: "console test"})
	req.Header().Set("Authorization", "Bearer "+adminKey)
	res, err := sluicev1connect.NewKeyServiceClient(http.DefaultClient, api).CreateKey(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Secret
}

// changeRule edits the params of the rule tier/name through the API, as
// another editor would.
func changeRule(t *testing.T, api, adminKey, tier, name string, edit func(*sluicev1.LimitParams)) {
	t.Helper()
	ctx := context.Background()
	list := connect.NewRequest(&sluicev1.ListTiersRequest{})
	list.Header().Set("Authorization", "Bearer "+adminKey)
	tiers, err := sluicev1connect.NewTierServiceClient(http.DefaultClient, api).ListTiers(ctx, list)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range tiers.Msg.Tiers {
		for _, r := range tr.Rules {
			if tr.Name != tier || r.Name != name {
				continue
			}
			edit(r.Params)
			update := connect.NewRequest(&sluicev1.UpdateRuleRequest{Rule: r})
			update.Header().Set("Authorization", "Bearer "+adminKey)
			if _, err := sluicev1connect.NewRuleServiceClient(http.DefaultClient, api).UpdateRule(ctx, update); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no rule %s/%s", tier, name)
}

// overrideOf is the override of identifier, read through the API.
func overrideOf(t *testing.T, api, adminKey, identifier string) *sluicev1.Override {
	t.Helper()
	req := connect.NewRequest(&sluicev1.ListOverridesRequest{IdentifierPrefix: identifier, PageSize: 1})
	req.Header().Set("Authorization", "Bearer "+adminKey)
	res, err := sluicev1connect.NewOverrideServiceClient(http.DefaultClient, api).ListOverrides(context.Background(), req)
	if err != nil || len(res.Msg.Overrides) == 0 || res.Msg.Overrides[0].Identifier != identifier {
		t.Fatalf("the override of %s: %v, %v", identifier, res, err)
	}
	return res.Msg.Overrides[0]
}

// blockMany creates n blocking overrides, prefix001 and on, through the API.
func blockMany(t *testing.T, api, adminKey, prefix string, n int) {
	t.Helper()
	ovs := sluicev1connect.NewOverrideServiceClient(http.DefaultClient, api)
	for i := range n {
		req := connect.NewRequest(&sluicev1.CreateOverrideRequest{Override: &sluicev1.Override{Identifier: fmt.Sprintf("%s%03d", prefix, i), Block: true}})
		req.Header().Set("Authorization", "Bearer "+adminKey)
		if _, err := ovs.CreateOverride(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

func jsString(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
