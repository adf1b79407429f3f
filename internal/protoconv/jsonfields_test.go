package protoconv

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

// A request whose JSON does not decode is marked with the field that
// failed, named as the domain's validation names it, and what is wrong.
func TestFieldJSONNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, field, desc string }{
		{`{"tierId":"t","rule":{"name":"r","params":{"algorithm":"ALGORITHM_FIXED_WINDOW","limit":"5","window":"abc"}}}`, "window", `must be a duration such as "90s" or "3600s"`},
		{`{"rule":{"name":"r","sync":"soon","params":{"window":"60s"}}}`, "sync", `must be a duration such as "90s" or "3600s"`},
		{"{\n  \"rule\": {\n    \"params\": {\"maxDelay\": \"x\"}\n  }\n}", "max_delay", `must be a duration such as "90s" or "3600s"`},
		{`{"rule":{"colour":"red"}}`, "colour", `unknown field "colour"`},
	} {
		m := &sluicev1.CreateRuleRequest{}
		if err := (fieldJSON{strictJSON{"json"}}).Unmarshal([]byte(tc.body), m); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		perr := DecodeError(m)
		if perr == nil || len(perr.Fields) != 1 || perr.Fields[0].Field != tc.field || perr.Fields[0].Description != tc.desc {
			t.Errorf("%s: %+v, want %s: %s", tc.body, perr, tc.field, tc.desc)
		}
	}
	ok := &sluicev1.CreateRuleRequest{}
	if err := (fieldJSON{strictJSON{"json"}}).Unmarshal([]byte(`{"tierId":"t"}`), ok); err != nil || DecodeError(ok) != nil || ok.TierId != "t" {
		t.Fatalf("a well-formed request: %v %v", err, DecodeError(ok))
	}
}

// FuzzFieldJSON: the control plane's JSON decoder takes any body without
// panicking, and either decodes it as protojson does or marks it with a
// field error that names no Go type.
func FuzzFieldJSON(f *testing.F) {
	for _, seed := range []string{`{"tierId":"t","rule":{"name":"r","params":{"window":"abc"}}}`, `{"rule":{"colour":1}}`, `{}`, `null`, `[`,
		"{\n \"rule\": {\"params\": {\"maxDelay\": \"é\"}}}", `{"rule":{"match":[{"key":1}]}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m := &sluicev1.CreateRuleRequest{}
		err := (fieldJSON{strictJSON{"json"}}).Unmarshal(body, m)
		if len(body) == 0 {
			if err == nil {
				t.Fatal("an empty body decoded")
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v, want a marked request", body, err)
		}
		strict := (strictJSON{"json"}).Unmarshal(body, &sluicev1.CreateRuleRequest{})
		perr := DecodeError(m)
		if (strict == nil) != (perr == nil) {
			t.Fatalf("%q: strict %v, marked %v", body, strict, perr)
		}
		if perr != nil && (len(perr.Fields) != 1 || strings.Contains(perr.Error(), "sluicev1.")) {
			t.Fatalf("%q: %v", body, perr)
		}
	})
}

// Every failure mode crosses to protobuf under its own name and back; a
// rule that names none is the default, local.
func TestFailureModesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []policy.FailureMode{policy.FailOpen, policy.FailClosed, policy.FailLocal} {
		p := failureModeToProto(m)
		if p == sluicev1.FailureMode_FAILURE_MODE_UNSPECIFIED || RuleFromProto(&sluicev1.Rule{FailureMode: p}).FailureMode != m {
			t.Errorf("%v: proto %v, back %v", m, p, RuleFromProto(&sluicev1.Rule{FailureMode: p}).FailureMode)
		}
	}
	if got := RuleFromProto(&sluicev1.Rule{}).FailureMode; got != policy.FailLocal {
		t.Errorf("a rule naming no failure mode: %v, want local", got)
	}
}
