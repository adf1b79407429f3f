package redisengine

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, assembled from scripts/ at start.

//go:embed scripts/*.lua
var scripts embed.FS

// script is the decision script: the families, then the driver.
var script = redis.NewScript(loadScript("clock", "common", "meter", "window", "log", "lease", "decide"))

// single and window1, the flat scripts, decide the commonest decisions,
// one rule of the meter family (single) or of the fixed or weighted sliding
// window (window1); they answer as script would, for a fraction of its
// Redis CPU.
var (
	single  = redis.NewScript(flatScript("single"))
	window1 = redis.NewScript(flatScript("window1"))
)

// flatScript is flat.lua with the step of family in place of its line
// "-- step", and load.lua and store.lua of "-- load" and "-- store".
func flatScript(family string) string {
	return insert(loadScript("clock", "flat"), "-- load", "load", "-- step", family, "-- store", "store")
}

// insert returns src with each line that is marks[i] (the mark and its
// indentation) replaced by the script marks[i+1]. Each mark must stand
// once.
func insert(src string, marks ...string) string {
	for i := 0; i+1 < len(marks); i += 2 {
		mark := marks[i] + "\n"
		if strings.Count(src, mark) != 1 {
			panic("redisengine: no single " + marks[i] + " to replace") // a build mistake
		}
		src = strings.Replace(src, mark, loadScript(marks[i+1]), 1)
	}
	return src
}

// multi decides decisions of several rules of the flat scripts' families,
// for about half script's Redis CPU (multi.lua).
var multi = redis.NewScript(multiScript())

// multiScript is multi.lua with the families' steps in place of its lines
// "-- meter step" and "-- window step", and load.lua and store.lua of
// "-- load" and "-- store".
func multiScript() string {
	return insert(loadScript("clock", "multi"), "-- load", "load", "-- meter step", "single", "-- window step", "window1", "-- store", "store")
}

// syncScript reconciles locally counted rules with the shared state.
var syncScript = redis.NewScript(loadScript("clock", "sync"))

// remoteScript charges meters with other regions' admissions (remote.lua,
// reading a state as the flat scripts do).
var remoteScript = redis.NewScript(insert(loadScript("clock", "remote"), "-- load", "load"))

// allScripts lists every script, for Preload.
var allScripts = []*redis.Script{script, single, window1, multi, syncScript, remoteScript}

func loadScript(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := scripts.ReadFile("scripts/" + n + ".lua")
		if err != nil {
			panic("redisengine: missing embedded script " + n) // a build mistake
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}
