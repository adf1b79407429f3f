package tenantfile

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policy"
)

// unknownFields returns a field error for each key of the document n that
// no field of type t (a struct, and what it holds) has, by its path in the
// file ("tiers[0].rules[1].colour: unknown field (line 12)"), so that a
// typo is reported with the file's other errors, not alone by a Go type's
// name. Types that read themselves (Duration, Values) are not looked into.
func unknownFields(n *yaml.Node, t reflect.Type, path string, out []policy.FieldError) []policy.FieldError {
	for n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode {
		if n.Kind == yaml.DocumentNode {
			if len(n.Content) == 0 {
				return out
			}
			n = n.Content[0]
		} else {
			n = n.Alias
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
		return out
	}
	switch {
	case t.Kind() == reflect.Struct && t != reflect.TypeFor[struct{}]() && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			at := join(path, key.Value)
			ft, ok := fields[key.Value]
			if !ok {
				if t.PkgPath() == reflect.TypeFor[File]().PkgPath() { // a time.Time reads itself
					out = append(out, policy.FieldError{Field: at, Description: fmt.Sprintf("unknown field (line %d)", key.Line)})
				}
				continue
			}
			out = unknownFields(val, ft, at, out)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			out = unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = unknownFields(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), out)
		}
	}
	return out
}

// yamlFields maps the YAML names of t's fields, those of inline fields
// included, to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
