package tenantfile

// The file's value types: match values and durations, as YAML and JSON.

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/days"
	"gopkg.in/yaml.v3"
)

// Values are a match key's values: written as one value when there is one
// (route: /login), else as a list.
type Values []string

// MarshalYAML writes one value as a scalar.
func (v Values) MarshalYAML() (any, error) {
	if len(v) == 1 {
		return v[0], nil
	}
	return []string(v), nil
}

// MarshalJSON writes v as MarshalYAML does.
func (v Values) MarshalJSON() ([]byte, error) {
	if len(v) == 1 {
		return json.Marshal(v[0])
	}
	return json.Marshal([]string(v))
}

// UnmarshalYAML reads a value or a list of values.
func (v *Values) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*v = Values{s}
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*v = l
	return nil
}

// UnmarshalJSON reads a string or an array of strings.
func (v *Values) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*v = Values{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*v = l
	return nil
}

// Duration is a time.Duration written as Go writes durations ("1m",
// "250ms"), whole days as days ("30d").
type Duration time.Duration

// MarshalYAML writes d as days.Format does: "1m", not "1m0s"; "7d", not
// "168h".
func (d Duration) MarshalYAML() (any, error) { return days.Format(time.Duration(d)), nil }

// MarshalJSON writes d as MarshalYAML does, a JSON string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(days.Format(time.Duration(d))) }

// UnmarshalYAML reads a duration such as "90s", "1h30m" or "30d".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := days.ParseDuration(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: %q is not a duration (such as 1m, 250ms or 1d)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}
