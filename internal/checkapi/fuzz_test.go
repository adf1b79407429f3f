package checkapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// FuzzCheckJSON: the body of an admitted check, encoded by hand
// (appendCheckJSON), is the JSON encoding/json writes of the same answer:
// the same bytes when no rule name holds a '<', '>', '&', U+2028 or U+2029
// (which encoding/json escapes), the same value always.
func FuzzCheckJSON(f *testing.F) {
	f.Add("per-client", "global", false, true, int64(10), int64(3), int64(1500), int64(0), int64(0), int64(7), "")
	f.Add(`q"uo\te`, "<b>&amp;", true, false, int64(0), int64(-1), int64(-5), int64(-1), int64(2500), int64(0), "~00000000000abc")
	f.Add("é\u2028\x01", "x", false, false, int64(1)<<62, int64(0), int64(1), int64(1), int64(1), int64(-3), `job "7"`)
	f.Fuzz(func(t *testing.T, name1, name2 string, shadow, allowed bool, lim, remaining, resetMS, retryMS, delayMS, version int64, lease string) {
		// Rule names are valid UTF-8 (policy.Rule.Validate), and lease
		// names too (the decoders refuse others).
		if !utf8.ValidString(name1) || !utf8.ValidString(name2) || !utf8.ValidString(lease) {
			t.Skip()
		}
		retry := time.Duration(retryMS) * time.Microsecond * 997
		if retryMS < 0 {
			retry = limit.Never
		}
		dec := decide.Decision{Allowed: true, Version: version, Rules: []decide.RuleResult{
			{Rule: &policy.Rule{Name: name1}, Result: limit.Result{Allowed: true, Limit: lim, Remaining: remaining,
				ResetAfter: time.Duration(resetMS) * time.Microsecond * 999, Delay: time.Duration(delayMS) * time.Microsecond}},
			{Rule: &policy.Rule{Name: name2, Shadow: shadow}, Result: limit.Result{Allowed: allowed, Limit: remaining,
				Remaining: lim, RetryAfter: retry}},
		}}
		// Degraded decisions, of every reason, from the version's value.
		dec.Degradation = decide.Degradation(uint64(version) % 4)
		dec.Degraded = dec.Degradation != decide.NotDegraded
		dec.Rules[0].Unenforced = dec.Degradation == decide.StoreUnavailable && allowed
		got := appendCheckJSON(nil, dec, lease)
		want, err := json.Marshal(CheckJSON{Allowed: true, Rules: httpport.RulesJSON(dec), ConfigVersion: dec.Version, Lease: lease, Degraded: dec.Degradation.Reason()})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if !strings.ContainsAny(name1+name2+lease, "<>&\u2028\u2029") && !bytes.Equal(got, want) {
			t.Fatalf("appendCheckJSON:\n%s\nencoding/json:\n%s", got, want)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("appendCheckJSON wrote no JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("appendCheckJSON:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}

// FuzzParseCheckBody: a body checkBody.ParseFast reads, the JSON decoder reads
// too, to the same check; and parse reads the bodies clients send most.
func FuzzParseCheckBody(f *testing.F) {
	common := []string{
		`{"descriptors":{"client_id":"alice"}}`,
		` { "descriptors" : { "client_id" : "alice" , "route" : "/login" } , "cost" : 2 , "tier" : "pro" } `,
		`{"descriptors":{"client_id":"a"},"lease":"l","release":true}`,
		`{"cost":-12,"release":false}`,
		`{}`,
	}
	for _, s := range common {
		var c checkBody
		if !c.ParseFast([]byte(s)) {
			f.Fatalf("parse does not read %s", s)
		}
		f.Add(s)
	}
	for _, s := range []string{`{"Tier":"x"}`, `{"cost":1,"cost":2}`, `{"descriptors":{"a":"1","a":"2"}}`, `{"cost":-0}`,
		`{"cost":01}`, `{"cost":1e2}`, `{"tier":"\u0041"}`, `{"tier":"é"}`, `{"descriptors":null}`, `{} {}`, `{"release":tru}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var fast checkBody
		if !fast.ParseFast([]byte(body)) {
			if fast.fast || fast.Cost != 0 || fast.Tier != "" || fast.parsed != nil {
				t.Fatalf("parse refused %q but changed its checkBody: %+v", body, fast)
			}
			return
		}
		var slow checkBody
		if err := jsonv2.Unmarshal([]byte(body), &slow, httpport.DecodeOptions); err != nil {
			t.Fatalf("parse read %q, the decoder refuses it: %v", body, err)
		}
		if fast.Tier != slow.Tier || fast.Cost != slow.Cost || fast.Lease != slow.Lease || fast.Release != slow.Release ||
			!slices.Equal(fast.descriptors(), slow.descriptors()) {
			t.Fatalf("%q: parse %+v, the decoder %+v", body, fast, slow)
		}
	})
}
