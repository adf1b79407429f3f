package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
)

// defaultAddress is where the CLI finds Sluice when told nothing: sluice
// dev's one port, the control plane's API and the decider's checks
// together. A deployment's control plane and deciders are named with
// SLUICE_SERVER and SLUICE_DECIDER.
const defaultAddress = "http://127.0.0.1:8080"

// devKeysPath is the file sluice dev keeps its keys in: SLUICE_DEV_DIR's,
// else the user cache directory's.
func devKeysPath(getenv func(string) string) string {
	dir := getenv("SLUICE_DEV_DIR")
	if dir == "" {
		cache := userCacheDir(getenv)
		if cache == "" {
			return ""
		}
		dir = filepath.Join(cache, "sluice", "dev")
	}
	return filepath.Join(dir, "keys.json")
}

// userCacheDir is os.UserCacheDir read through getenv: "" when the
// environment names none.
func userCacheDir(getenv func(string) string) string {
	switch {
	case runtime.GOOS == "darwin" && getenv("HOME") != "":
		return filepath.Join(getenv("HOME"), "Library", "Caches")
	case runtime.GOOS == "windows":
		return getenv("LocalAppData")
	case getenv("XDG_CACHE_HOME") != "":
		return getenv("XDG_CACHE_HOME")
	case getenv("HOME") != "":
		return filepath.Join(getenv("HOME"), ".cache")
	}
	return ""
}

// withDevKeys returns getenv with SLUICE_KEY and SLUICE_CHECK_KEY, when
// unset, taken from sluice dev's key file (its demo tenant's admin and
// check keys), as long as the CLI talks to sluice dev's default address
// (SLUICE_SERVER and SLUICE_DECIDER unset): the quick start's commands
// need no variables. A key given, or another server named, wins.
func withDevKeys(getenv func(string) string) func(string) string {
	if getenv("SLUICE_SERVER") != "" || getenv("SLUICE_DECIDER") != "" {
		return getenv
	}
	var keys struct{ Admin, Check string }
	b, err := os.ReadFile(devKeysPath(getenv))
	if err != nil || json.Unmarshal(b, &keys) != nil {
		return getenv
	}
	return func(k string) string {
		v := getenv(k)
		switch {
		case v != "":
		case k == "SLUICE_KEY":
			v = keys.Admin
		case k == "SLUICE_CHECK_KEY":
			v = keys.Check
		}
		return v
	}
}
