package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTenantValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		t    Tenant
		want []string
	}{
		{"valid", Tenant{Slug: "acme", Name: "Acme Inc."}, nil},
		{"with a default tier", Tenant{Slug: "acme-2", Name: "Acme", DefaultTier: "free"}, nil},
		{"63 bytes of slug", Tenant{Slug: strings.Repeat("a", 63), Name: "Acme"}, nil},
		{"no slug", Tenant{Name: "Acme"}, []string{"slug"}},
		{"64 bytes of slug", Tenant{Slug: strings.Repeat("a", 64), Name: "Acme"}, []string{"slug"}},
		{"upper case slug", Tenant{Slug: "Acme", Name: "Acme"}, []string{"slug"}},
		{"slug starting with '-'", Tenant{Slug: "-acme", Name: "Acme"}, []string{"slug"}},
		{"slug with a dot", Tenant{Slug: "acme.io", Name: "Acme"}, []string{"slug"}},
		{"no name", Tenant{Slug: "acme"}, []string{"name"}},
		{"unknown status", Tenant{Slug: "acme", Name: "Acme", Status: TenantSuspended + 1}, []string{"status"}},
		{"bad default tier", Tenant{Slug: "acme", Name: "Acme", DefaultTier: "Free Tier"}, []string{"default_tier"}},
		{"everything wrong", Tenant{Slug: "A", Status: 9, DefaultTier: "-"}, []string{"slug", "name", "status", "default_tier"}},
	}
	for _, tt := range tests {
		err := tt.t.Validate()
		if got := fields(err); !slices.Equal(got, tt.want) {
			t.Errorf("%s: fields %v, want %v", tt.name, got, tt.want)
		}
		if tt.want != nil && ErrorCode(err) != CodeInvalid {
			t.Errorf("%s: code %v, want invalid", tt.name, ErrorCode(err))
		}
	}
}

func TestTierValidateRefusesTooManyRules(t *testing.T) {
	t.Parallel()
	tier := Tier{Name: "big", Rules: make([]Rule, MaxRulesPerTier+1)}
	for i := range tier.Rules {
		tier.Rules[i] = validRule()
		tier.Rules[i].Name = fmt.Sprint("r", i)
	}
	if got := fields(tier.Validate()); !slices.Equal(got, []string{"rules"}) {
		t.Fatalf("fields %v, want [rules]", got)
	}
	tier.Rules = tier.Rules[:MaxRulesPerTier]
	if err := tier.Validate(); err != nil {
		t.Fatalf("a tier of MaxRulesPerTier rules: %v", err)
	}
}

func TestKeySecrets(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, kind := range []KeyKind{KeyAdmin, KeyCheck, KeyViewer} {
		for range 100 {
			secret, prefix := NewKeySecret(kind)
			if !strings.HasPrefix(secret, keyPrefixes[kind]) || len(secret) != len(keyPrefixes[kind])+32 {
				t.Fatalf("%q: want %s and 32 characters", secret, keyPrefixes[kind])
			}
			if !strings.HasPrefix(secret, prefix) || len(prefix) != len(keyPrefixes[kind])+4 {
				t.Fatalf("prefix %q of %q: want the kind and 4 characters", prefix, secret)
			}
			if strings.ToLower(secret) != secret {
				t.Fatalf("%q is not lower case", secret)
			}
			if seen[secret] {
				t.Fatalf("%q drawn twice", secret)
			}
			seen[secret] = true
		}
	}
	a, _ := NewKeySecret(KeyCheck)
	if h, again := HashKey(a), HashKey(strings.Clone(a)); h != again || h == HashKey(a+"x") {
		t.Fatal("HashKey is not a function of the secret alone")
	}
}

func TestCheckKeyLive(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	switch {
	case !(CheckKey{}).Live(now):
		t.Fatal("a key without expiry is not live")
	case !(CheckKey{ExpiresAt: now.Add(time.Second)}).Live(now):
		t.Fatal("a key before its expiry is not live")
	case (CheckKey{ExpiresAt: now}).Live(now):
		t.Fatal("a key at its expiry is still live")
	}
}

func TestErrorsMatchByCode(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("pgstore: get rule: %w", Errorf(CodeNotFound, "rule %s not found", "r1"))
	switch {
	case !errors.Is(err, ErrNotFound):
		t.Fatal("a wrapped not-found error is not ErrNotFound")
	case errors.Is(err, ErrConflict):
		t.Fatal("a not-found error is ErrConflict")
	case ErrorCode(err) != CodeNotFound:
		t.Fatalf("code %v", ErrorCode(err))
	case ErrorCode(errors.New("dial tcp: refused")) != CodeUnknown:
		t.Fatal("an internal error has a code")
	}
	if got := Code(200).String(); got != "code(200)" {
		t.Fatalf("an unknown code reads %q", got)
	}
	e := &Error{Code: CodeInvalid, Message: "invalid rule", Fields: []FieldError{{"limit", "too big"}, {"window", "required"}}}
	if got := e.Error(); got != "invalid rule: limit: too big; window: required" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestWithinNestsFields(t *testing.T) {
	t.Parallel()
	inner := (&Tenant{Slug: "acme"}).Validate()
	err := Within(inner, "files[2]", "files[2] (tenant acme)")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalid {
		t.Fatalf("%v: want an invalid *Error", err)
	}
	if !strings.HasPrefix(e.Message, "files[2] (tenant acme): ") || !slices.Equal(fields(err), []string{"files[2].name"}) {
		t.Fatalf("message %q, fields %v", e.Message, fields(err))
	}
	plain := errors.New("read acme.yaml: permission denied")
	if err := Within(plain, "files[0]", "files[0]"); !errors.Is(err, plain) || ErrorCode(err) != CodeUnknown {
		t.Fatalf("%v: an internal error must keep its chain and no code", err)
	}
}
