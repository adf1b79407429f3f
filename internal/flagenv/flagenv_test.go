package flagenv

import (
	"testing"
	"time"
)

func TestEnvDefaultsAndParsing(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"S": "x", "I": "42", "F": "0.25", "D": "50ms", "BAD": "nope"}
	e := Env(func(k string) string { return vars[k] })
	if e.String("S", "d") != "x" || e.String("UNSET", "d") != "d" {
		t.Error("String")
	}
	if e.Int("I", 1) != 42 || e.Int("BAD", 1) != 1 || e.Int("UNSET", 7) != 7 {
		t.Error("Int")
	}
	if e.Float("F", 1) != 0.25 || e.Float("BAD", 1) != 1 {
		t.Error("Float")
	}
	if e.Duration("D", time.Second) != 50*time.Millisecond || e.Duration("BAD", time.Second) != time.Second {
		t.Error("Duration")
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	got := List(" a, ,b,,c ")
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("List = %q", got)
	}
	if List("") != nil {
		t.Fatal("an empty value is no items")
	}
}
