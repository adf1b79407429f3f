package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// sluice demo makes on a control plane the demo tenant sluice dev seeds,
// the same in every rule, prints its three keys, and leaves it as it is
// when run again.
func TestDemoMakesSluiceDevsTenant(t *testing.T) {
	ctx := context.Background()
	export := func(getenv func(string) string) string {
		t.Helper()
		var out, errOut strings.Builder
		if err := run(ctx, []string{"export", "demo"}, &out, &errOut, getenv); err != nil {
			t.Fatalf("export demo: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	env := devEnv(t)
	banner, stop := startDev(t, env)
	defer func() { _ = stop() }()
	find := func(re string) string { return regexp.MustCompile(re).FindStringSubmatch(banner)[1] }
	devVars := map[string]string{"SLUICE_SERVER": find(`API\s+(http://\S+)`), "SLUICE_KEY": find(`operator key\s+(\S+)`)}
	devs := export(func(k string) string { return devVars[k] })

	store, getenv := importServer(t)
	var out, errOut strings.Builder
	if err := run(ctx, []string{"demo"}, &out, &errOut, getenv); err != nil {
		t.Fatalf("sluice demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, kind := range []string{"admin", "check", "viewer"} {
		secret := regexp.MustCompile(`sk_` + kind + `_\w+`).FindString(out.String())
		if secret == "" {
			t.Fatalf("sluice demo printed no %s key:\n%s", kind, out.String())
		}
		if _, err := store.KeyByHash(ctx, policy.HashKey(secret)); err != nil {
			t.Errorf("the printed %s key: %v", kind, err)
		}
	}
	if got := export(getenv); got != devs {
		t.Errorf("sluice demo's tenant:\n%s\nsluice dev's:\n%s", got, devs)
	}
	out.Reset()
	if err := run(ctx, []string{"demo"}, &out, &errOut, getenv); err != nil || !strings.Contains(out.String(), "exists") {
		t.Fatalf("sluice demo again: %v %q, want the tenant left as it is", err, out.String())
	}
}
