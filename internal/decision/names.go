package decision

import (
	"fmt"
	"strings"
)

// NameField is a field of a compatible API's request that names what is
// counted, a descriptor's value: Unkey's namespace and identifier,
// gubernator's name and unique_key.
type NameField struct{ Field, Value string }

// CheckNames tells bad of each of fs that is empty, longer than max bytes
// or holds a NUL (which no descriptor value may).
func CheckNames(bad func(field, desc string), max int, fs ...NameField) {
	for _, f := range fs {
		switch {
		case len(f.Value) < 1 || len(f.Value) > max:
			bad(f.Field, fmt.Sprintf("must be 1 to %d bytes", max))
		case strings.IndexByte(f.Value, 0) >= 0:
			bad(f.Field, "must not contain NUL")
		}
	}
}
