package flagenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnvDefaultsAndParsing(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"S": "x", "I": "42", "F": "0.25", "D": "50ms", "B1": "1", "BT": "TRUE", "B0": "false"}
	e := NewEnv(func(k string) string { return vars[k] })
	if e.String("S", "d") != "x" || e.String("UNSET", "d") != "d" {
		t.Error("String")
	}
	if e.Int("I", 1) != 42 || e.Int("UNSET", 7) != 7 {
		t.Error("Int")
	}
	if e.Float("F", 1) != 0.25 || e.Float("UNSET", 1) != 1 {
		t.Error("Float")
	}
	if e.Duration("D", time.Second) != 50*time.Millisecond || e.Duration("UNSET", time.Second) != time.Second {
		t.Error("Duration")
	}
	// Booleans as strconv.ParseBool reads them, everywhere.
	if !e.Bool("B1", false) || !e.Bool("BT", false) || e.Bool("B0", true) || !e.Bool("UNSET", true) {
		t.Error("Bool")
	}
	if err := e.Err(); err != nil {
		t.Fatalf("well-formed values: %v", err)
	}
}

// A value that does not parse is never replaced silently: Err names every
// such variable, its value and what it should be.
func TestEnvRefusesMalformedValues(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"SLUICE_DECISION_BUDGET": "50", "SLUICE_REDIS_CLUSTER": "yes", "SLUICE_N": "1k", "SLUICE_SHARE": "half"}
	e := NewEnv(func(k string) string { return vars[k] })
	if e.Duration("SLUICE_DECISION_BUDGET", time.Second) != time.Second || e.Bool("SLUICE_REDIS_CLUSTER", false) ||
		e.Int("SLUICE_N", 3) != 3 || e.Float("SLUICE_SHARE", 1) != 1 {
		t.Error("a malformed value gives the default back (and is reported)")
	}
	err := e.Err()
	if err == nil {
		t.Fatal("no error for malformed values")
	}
	for _, want := range []string{`SLUICE_DECISION_BUDGET="50": want a duration with its unit`, `SLUICE_REDIS_CLUSTER="yes": want true or false`,
		`SLUICE_N="1k": want an integer`, `SLUICE_SHARE="half": want a number`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
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

// A secret's NAME_FILE fills NAME when it is unset; a set NAME wins; a
// variable not listed as a secret is left alone; a missing or empty file
// is an error that names the variable and not the contents.
func TestWithSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile, emptyFile := filepath.Join(dir, "key"), filepath.Join(dir, "empty")
	if err := os.WriteFile(keyFile, []byte("sk_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptyFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"SLUICE_OPERATOR_KEY_FILE": keyFile, "SLUICE_DECIDER_KEY": "set", "SLUICE_DECIDER_KEY_FILE": keyFile,
		"SLUICE_STATE_FILE": keyFile, "SLUICE_ADDR": "x"}
	getenv, err := WithSecretFiles(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"SLUICE_OPERATOR_KEY": "sk_secret", "SLUICE_DECIDER_KEY": "set", "SLUICE_STATE": "", "SLUICE_ADDR": "x"} {
		if got := getenv(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, path := range []string{filepath.Join(dir, "none"), emptyFile} {
		vars := map[string]string{"KAFKA_SASL_PASSWORD_FILE": path}
		_, err := WithSecretFiles(func(k string) string { return vars[k] })
		if err == nil || !strings.Contains(err.Error(), "KAFKA_SASL_PASSWORD_FILE") {
			t.Errorf("file %s: %v", path, err)
		}
	}
}
