// Package auditdiff tells what an audit entry changed: the fields that
// differ between the JSON of a value before and after a change, by path,
// as text a person reads (durations as 1m30s, not nanoseconds).
//
// The values are the JSON the store writes of its Go types (field names
// as Go spells them); paths are those names in snake_case, as the API's
// fields are named: Params.LeaseTTL is params.lease_ttl.
package auditdiff

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/internal/policy"
)

// Change is one field whose value differs; Old or New is "" where the
// field is unset on that side.
type Change struct {
	Field, Old, New string
}

// durations are the fields held as nanoseconds.
var durations = map[string]bool{"window": true, "warm_up": true, "max_delay": true, "granularity": true, "lease_ttl": true, "sync": true}

// enums are the fields held as numbers that have names; their zero is a
// value too (failure mode open, status active), shown as the others are.
var enums = map[string]func(n int64) string{
	"algorithm":    func(n int64) string { return policy.Algorithm(n).String() },
	"failure_mode": func(n int64) string { return policy.FailureMode(n).String() },
	"calendar":     func(n int64) string { return policy.Calendar(n).String() }, // none: ""
	"status": func(n int64) string {
		if n == int64(policy.TenantSuspended) {
			return "suspended"
		}
		return "active"
	},
}

// Changes lists the fields that differ between old and new (JSON; empty
// or null for none, as in a creation or a deletion), sorted by path.
// Objects are compared field by field; lists and other values whole.
// Unset, zero and empty values count as the same, so a creation lists
// only what it set (named numbers, as an algorithm, by name, even zero);
// a value's own id is no change. Values that are not JSON objects are one change of
// the field "".
func Changes(old, new []byte) []Change {
	a, b := flatten(old), flatten(new)
	var out []Change
	paths := maps.Clone(a)
	maps.Copy(paths, b)
	for _, k := range slices.Sorted(maps.Keys(paths)) {
		if a[k] != b[k] {
			out = append(out, Change{Field: k, Old: a[k], New: b[k]})
		}
	}
	return out
}

// flatten is the non-zero leaves of a JSON value by path.
func flatten(raw []byte) map[string]string {
	out := map[string]string{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return out
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		out[""] = string(raw)
		return out
	}
	walk(out, "", v)
	return out
}

func walk(out map[string]string, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			// A value's id is the entry's resource id: not a change.
			if path == "" && snake(k) == "id" {
				continue
			}
			walk(out, join(path, snake(k)), x)
		}
	case json.Number:
		n, err := v.Int64()
		switch name := enums[last(path)]; {
		case err == nil && n >= 0 && n < 256 && name != nil:
			if text := name(n); text != "" {
				out[path] = text
			}
		case v.String() == "0":
		case err == nil && durations[last(path)]:
			out[path] = time.Duration(n).String()
		default:
			out[path] = v.String()
		}
	case string:
		if v != "" && v != zeroTime {
			out[path] = v
		}
	case bool:
		if v {
			out[path] = strconv.FormatBool(v)
		}
	case []any:
		if len(v) == 0 {
			return
		}
		b, _ := json.Marshal(readable("", v))
		out[path] = string(b)
	}
}

// Readable is the JSON value raw as the API names and shows things: keys
// in snake_case, named numbers by name (an algorithm, a failure mode, a
// status), durations as text ("1m30s"); every field kept, zeros too. What
// is not JSON, or is empty, is returned as it is.
func Readable(raw []byte) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return raw
	}
	b, err := json.Marshal(readable("", v))
	if err != nil {
		return raw
	}
	return b
}

// readable is v as Readable shows it, key the name v stands under.
func readable(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[snake(k)] = readable(snake(k), x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = readable("", x)
		}
		return out
	case json.Number:
		n, err := v.Int64()
		switch name := enums[key]; {
		case err == nil && n >= 0 && n < 256 && name != nil:
			return name(n)
		case err == nil && durations[key]:
			return time.Duration(n).String()
		}
	}
	return v
}

// zeroTime is the JSON of Go's zero time.Time: an unset time (an
// override or key that never expires), not a change.
const zeroTime = "0001-01-01T00:00:00Z"

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func last(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

// snake is a Go field name in snake_case: KeyBy is key_by, LeaseTTL
// lease_ttl, RuleID rule_id; a name already in it stays.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]))
			acronymEnd := i > 0 && unicode.IsUpper(r[i-1]) && i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || acronymEnd {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}
