package main

import "flag"

// parseArgs parses args with fs, taking flags wherever they stand, before
// the positional arguments or among them (sluice rules update ID -limit 3,
// as kubectl and gh take them), and returns the positional arguments in
// order. After "--" every argument is positional, so a value that starts
// with '-' can be given.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
