package kongimport

import (
	"cmp"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/tenantfile"
)

// The decK file as the import reads it: services, routes, consumers and
// plugins, and where each plugin applies.

type file struct {
	Workspace      string     `yaml:"_workspace"`
	Services       []service  `yaml:"services"`
	Routes         []route    `yaml:"routes"`
	Plugins        []plugin   `yaml:"plugins"`
	Consumers      []consumer `yaml:"consumers"`
	ConsumerGroups []consumer `yaml:"consumer_groups"`
}

type service struct {
	ID      string   `yaml:"id"`
	Name    string   `yaml:"name"`
	Routes  []route  `yaml:"routes"`
	Plugins []plugin `yaml:"plugins"`
}

type route struct {
	ID      string   `yaml:"id"`
	Name    string   `yaml:"name"`
	Paths   []string `yaml:"paths"`
	Hosts   []string `yaml:"hosts"`
	Methods []string `yaml:"methods"`
	// Headers are the request headers the route matches: any of each
	// name's values.
	Headers map[string]tenantfile.Values `yaml:"headers"`
	Service ref                          `yaml:"service"`
	Plugins []plugin                     `yaml:"plugins"`
}

type consumer struct {
	Plugins []plugin `yaml:"plugins"`
}

type plugin struct {
	Name          string `yaml:"name"`
	InstanceName  string `yaml:"instance_name"`
	Enabled       *bool  `yaml:"enabled"`
	Config        config `yaml:"config"`
	Service       ref    `yaml:"service"`
	Route         ref    `yaml:"route"`
	Consumer      ref    `yaml:"consumer"`
	ConsumerGroup ref    `yaml:"consumer_group"`
}

// config holds both plugins' settings; the others (policy, redis,
// strategy, namespace…) name Kong's own storage and are ignored.
type config struct {
	Second            *float64  `yaml:"second"`
	Minute            *float64  `yaml:"minute"`
	Hour              *float64  `yaml:"hour"`
	Day               *float64  `yaml:"day"`
	Month             *float64  `yaml:"month"`
	Year              *float64  `yaml:"year"`
	LimitBy           string    `yaml:"limit_by"`
	HeaderName        string    `yaml:"header_name"`
	Path              string    `yaml:"path"`
	FaultTolerant     *bool     `yaml:"fault_tolerant"`
	HideClientHeaders bool      `yaml:"hide_client_headers"`
	ErrorCode         *float64  `yaml:"error_code"`
	ErrorMessage      string    `yaml:"error_message"`
	SyncRate          *float64  `yaml:"sync_rate"`
	Limit             []float64 `yaml:"limit"`
	WindowSize        []float64 `yaml:"window_size"`
	WindowType        string    `yaml:"window_type"`
	Identifier        string    `yaml:"identifier"`
	// EnforceConsumerGroups gives consumer groups limits of their own,
	// which are not imported (see the notes).
	EnforceConsumerGroups bool `yaml:"enforce_consumer_groups"`
	// Policy (rate-limiting) and Strategy (advanced) say where Kong
	// counts: local (the default), on each node apart, is told in a note.
	Policy   string `yaml:"policy"`
	Strategy string `yaml:"strategy"`
}

// ref is a reference to another entity: its name or id, written as a
// string or as {name: …} or {id: …}.
type ref struct{ Name, ID string }

func (r *ref) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		r.Name, r.ID = n.Value, n.Value
		return nil
	}
	var m struct {
		ID   string `yaml:"id"`
		Name string `yaml:"name"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	r.Name, r.ID = m.Name, m.ID
	return nil
}

func (r ref) set() bool { return r.Name != "" || r.ID != "" }

// names reports whether r refers to the entity of this id and name.
func (r ref) names(id, name string) bool {
	return r.ID != "" && r.ID == id || r.Name != "" && r.Name == name
}

// instance is one plugin to import, with its scope.
type instance struct {
	plugin *plugin
	field  string
	svc    *service // service scope, or the route's service
	rt     *route   // route scope
}

func (in *instance) enabled() bool { return in.plugin.Enabled == nil || *in.plugin.Enabled }

// scope names the instance's rules: instance_name, else global,
// service-NAME or route-NAME.
func (in *instance) scope() string {
	switch {
	case in.plugin.InstanceName != "":
		return in.plugin.InstanceName
	case in.rt != nil:
		return "route-" + cmp.Or(in.rt.Name, in.rt.ID)
	case in.svc != nil:
		return "service-" + cmp.Or(in.svc.Name, in.svc.ID)
	}
	return "global"
}
