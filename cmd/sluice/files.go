package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
)

// yamlFiles expands paths, a directory standing for its .yaml and .yml
// files and those of the extensions more (".json"), not its
// subdirectories', in name order.
func yamlFiles(paths []string, more ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		entries, err := os.ReadDir(p)
		if err != nil {
			files = append(files, p) // a file, or an error reading it reports
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || slices.Contains(more, ext)) {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no .yaml or .yml file in %s", errInput, strings.Join(paths, ", "))
	}
	return files, nil
}

// readInput reads the file of name, or standard input for "-", up to
// limit bytes and one more (for the reader to tell the file too large).
func readInput(name string, limit int64) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, limit+1))
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// reportInvalid prints why file name is refused: each invalid field on a
// line of its own.
func reportInvalid(stderr io.Writer, name string, err error) {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, pe.Message)
	for _, fe := range pe.Fields {
		fmt.Fprintf(stderr, "  %s: %s\n", fe.Field, fe.Description)
	}
}

// emitter prints the results of a command over n files: for people as
// each comes; as JSON, the one result alone, or an array of them all once
// the last has come.
type emitter struct {
	w       io.Writer
	json    bool
	n       int
	results []any
}

func (e *emitter) emit(v any, human func(io.Writer)) error {
	if !e.json {
		human(e.w)
		return nil
	}
	if e.results = append(e.results, v); e.n > 1 && len(e.results) < e.n {
		return nil
	}
	if e.n > 1 {
		v = e.results
	}
	return printResult(e.w, true, v, nil)
}

// listFlag is a flag given any number of times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
