// Package flagenv is how the binaries read their configuration: flag
// defaults taken from environment variables (a flag given on the command
// line wins), and a main that stops cleanly on SIGINT or SIGTERM.
package flagenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env reads variables through a getenv function (os.Getenv, or a map in
// tests). A variable that is unset gives the default; one that is set but
// does not parse gives the default too, and is remembered for Err, which
// the binary checks before it starts: a malformed setting stops it, named,
// rather than be replaced silently.
type Env struct {
	get  func(string) string
	errs []error
}

// NewEnv returns an Env reading through getenv.
func NewEnv(getenv func(string) string) *Env { return &Env{get: getenv} }

// Get returns k's value as it is ("" when unset).
func (e *Env) Get(k string) string { return e.get(k) }

// String returns k's value, or def when unset.
func (e *Env) String(k, def string) string {
	if v := e.get(k); v != "" {
		return v
	}
	return def
}

// bad remembers that k's value v is not what it should be.
func (e *Env) bad(k, v, want string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q: want %s", k, v, want))
}

// Int returns k as an integer, or def.
func (e *Env) Int(k string, def int) int { return read(e, k, def, "an integer", strconv.Atoi) }

// Float returns k as a number, or def.
func (e *Env) Float(k string, def float64) float64 {
	return read(e, k, def, "a number", func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

// Duration returns k as a Go duration ("50ms", "720h"), or def. A number
// without a unit is refused (but 0): "50" could mean 50 ms or 50 s.
func (e *Env) Duration(k string, def time.Duration) time.Duration {
	return read(e, k, def, `a duration with its unit, such as "50ms", "10s" or "2h"`, time.ParseDuration)
}

// Bool returns k as strconv.ParseBool reads it (1, t, true, TRUE, 0, f,
// false, …), or def.
func (e *Env) Bool(k string, def bool) bool {
	return read(e, k, def, "true or false (or 1 or 0)", strconv.ParseBool)
}

// read returns k parsed by parse, or def when unset; a value parse
// refuses gives def and is remembered for Err, with want, what k should be.
func read[T any](e *Env, k string, def T, want string, parse func(string) (T, error)) T {
	v := e.get(k)
	if v == "" {
		return def
	}
	x, err := parse(strings.TrimSpace(v))
	if err != nil {
		e.bad(k, v, want)
		return def
	}
	return x
}

// Err returns every malformed variable read so far, nil when none.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// List splits a comma-separated value, trimming items and dropping empty
// ones.
func List(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// RunFunc is a binary's body: it serves until ctx ends.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and environment (secrets
// read from files as WithSecretFiles says) until SIGINT or SIGTERM, and
// exits 1 with the error, prefixed by name, when it fails.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	getenv, err := WithSecretFiles(os.Getenv)
	if err == nil {
		err = run(ctx, os.Args[1:], getenv, os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// SecretNames are the variables holding secrets (keys, passwords, URLs
// that may carry one), each of which may instead be read from the file
// that NAME_FILE names.
var SecretNames = []string{"SLUICE_OPERATOR_KEY", "SLUICE_DECIDER_KEY", "SLUICE_PROXY_KEY", "SLUICE_KEY", "SLUICE_CHECK_KEY",
	"KAFKA_SASL_PASSWORD", "DATABASE_URL", "REDIS_URL", "OTEL_EXPORTER_OTLP_HEADERS"}

// WithSecretFiles returns getenv with, for each of SecretNames that is
// unset, the contents of the file its NAME_FILE variable names (white
// space around them trimmed): Docker's and Kubernetes' way of handing over
// secrets without putting them in the environment. The files are read
// now; one that cannot be read, or is empty, is an error naming the
// variable (never the contents).
func WithSecretFiles(getenv func(string) string) (func(string) string, error) {
	files := map[string]string{}
	for _, name := range SecretNames {
		path := getenv(name + "_FILE")
		if path == "" || getenv(name) != "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s_FILE: %w", name, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return nil, fmt.Errorf("%s_FILE: %s is empty", name, path)
		}
		files[name] = v
	}
	if len(files) == 0 {
		return getenv, nil
	}
	return func(k string) string {
		if v, ok := files[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}
