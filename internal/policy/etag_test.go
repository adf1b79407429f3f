package policy

import (
	"reflect"
	"testing"
	"time"
)

// TestETagChangesWithEveryField changes each field of a rule and of a
// tenant in turn, nested params included: a field the etag missed would let
// a conditioned update overwrite a change to it.
func TestETagChangesWithEveryField(t *testing.T) {
	rule := Rule{ID: "r1", Name: "per-client", Match: []Match{{Key: "route", Value: "/x"}}, KeyBy: []string{"client_id"},
		Params: Params{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 5}, Enabled: true}
	tenant := Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}
	for _, c := range []struct {
		name string
		v    any
		etag func(any) string
	}{
		{"rule", &rule, func(v any) string { return v.(*Rule).ETag() }},
		{"tenant", &tenant, func(v any) string { return v.(*Tenant).ETag() }},
	} {
		base := c.etag(c.v)
		if again := c.etag(c.v); again != base || base == "" {
			t.Fatalf("%s: etag %q then %q", c.name, base, again)
		}
		seen := map[string]string{base: "unchanged"}
		var walk func(path string, f reflect.Value)
		walk = func(path string, f reflect.Value) {
			if f.Kind() == reflect.Struct {
				for i := range f.NumField() {
					walk(path+"."+f.Type().Field(i).Name, f.Field(i))
				}
				return
			}
			old := reflect.New(f.Type()).Elem()
			old.Set(f)
			switch f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Int64, reflect.Int, reflect.Int32:
				f.SetInt(f.Int() + 1)
			case reflect.Uint8, reflect.Uint16, reflect.Uint32:
				f.SetUint(f.Uint() + 1)
			case reflect.Float64:
				f.SetFloat(f.Float() + 1.5)
			case reflect.Slice:
				f.Set(reflect.Append(f, reflect.New(f.Type().Elem()).Elem()))
			default:
				t.Fatalf("%s%s: a field of kind %s the test does not change", c.name, path, f.Kind())
			}
			got := c.etag(c.v)
			if prev, dup := seen[got]; dup {
				t.Errorf("%s%s changed, etag %q the same as when %s", c.name, path, got, prev)
			}
			seen[got] = path
			f.Set(old)
			if back := c.etag(c.v); back != base {
				t.Errorf("%s%s restored: etag %q, want %q", c.name, path, back, base)
			}
		}
		walk("", reflect.ValueOf(c.v).Elem())
		if len(seen) < 5 {
			t.Errorf("%s: only %d states seen", c.name, len(seen))
		}
	}
}
