package deploy

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/regions"
	"gopkg.in/yaml.v3"
)

type service struct {
	Build       any               `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]any    `yaml:"depends_on"`
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadCompose(t *testing.T) map[string]service { return loadComposeFile(t, "docker-compose.yml") }

// loadComposeFile reads the services of a compose file, its path from
// the repository's root.
func loadComposeFile(t *testing.T, path string) map[string]service {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), path))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]service `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Services
}

// configSource is where a binary defines and documents its settings:
// its main.go, or the package that assembles it.
var configSource = map[string]string{
	"controlplane": "internal/controlplane/settings.go",
	"dataplane":    "internal/dataplane/flags.go",
	"analytics":    "internal/analytics/settings.go",
}

// documentedEnv reads the variables a binary documents in its package
// comment's configuration table, and its settings' doc comment.
func documentedEnv(t *testing.T, binary string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "cmd", binary, "main.go"))
	if err != nil {
		t.Fatalf("no binary %s: %v", binary, err)
	}
	if binary == "sluice" { // the CLI: its usage's environment section
		env := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^  (SLUICE_[A-Z0-9_]+)\s`).FindAllStringSubmatch(string(b), -1) {
			env[m[1]] = true
		}
		return env
	}
	settings, err := os.ReadFile(filepath.Join(root(t), configSource[binary]))
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, settings...)
	env := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t\s*(?:-[a-z-]+\s+)?([A-Z][A-Z0-9_]+)\s`).FindAllStringSubmatch(string(b), -1) {
		env[m[1]] = true
	}
	if len(env) == 0 {
		t.Fatalf("cmd/%s documents no environment variables", binary)
	}
	return env
}

// required lists what each binary cannot run well without in a
// deployment (its defaults point at loopback).
var required = map[string][]string{
	"controlplane": {"SLUICE_CONTROLPLANE_ADDR", "DATABASE_URL", "SLUICE_OPERATOR_KEY", "SLUICE_DECIDER_KEY"},
	"dataplane":    {"SLUICE_DATAPLANE_ADDR", "SLUICE_CONTROL_PLANE_URL", "SLUICE_DECIDER_KEY", "REDIS_URL", "KAFKA_BROKERS"},
	"analytics":    {"SLUICE_ANALYTICS_ADDR", "DATABASE_URL", "KAFKA_BROKERS"},
}

// The image holds every binary of cmd/: sluice runs sluice-bench.
func TestImageHasEveryBinary(t *testing.T) {
	t.Parallel()
	dockerfile, err := os.ReadFile(filepath.Join(root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir(filepath.Join(root(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !strings.Contains(string(dockerfile), "./cmd/"+d.Name()+" ") && !strings.Contains(string(dockerfile), "./cmd/"+d.Name()+"\n") {
			t.Errorf("the Dockerfile does not build cmd/%s", d.Name())
		}
	}
}

func TestComposeMatchesTheBinariesConfiguration(t *testing.T) {
	t.Parallel()
	services := loadCompose(t)
	counts := checkServices(t, services)
	if counts["controlplane"] != 1 || counts["dataplane"] != 2 || counts["analytics"] != 1 {
		t.Errorf("services per binary %v, want a control plane, two deciders and analytics", counts)
	}
	for _, dep := range []string{"postgres", "redis", "kafka"} {
		if _, ok := services[dep]; !ok {
			t.Errorf("no %s service", dep)
		}
	}
	if env := services["kafka"].Environment; !strings.Contains(env["KAFKA_PROCESS_ROLES"], "controller") {
		t.Errorf("Kafka is not in KRaft mode: %v", env)
	}
}

// checkServices holds each service of a compose file built from this
// repository to its binary's configuration: documented variables, those
// a deployment needs, listening where other containers reach it, and
// pointing at services it depends on. It returns the services per binary.
func checkServices(t *testing.T, services map[string]service) map[string]int {
	t.Helper()
	dockerfile, err := os.ReadFile(filepath.Join(root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for name, s := range services {
		if s.Build == nil {
			continue // a dependency's own image
		}
		if len(s.Command) == 0 {
			t.Errorf("%s: no command naming the binary", name)
			continue
		}
		binary := s.Command[0]
		counts[binary]++
		if !strings.Contains(string(dockerfile), "./cmd/"+binary) {
			t.Errorf("%s: the Dockerfile does not build %s", name, binary)
		}
		documented := documentedEnv(t, binary)
		for k := range s.Environment {
			if !documented[k] {
				t.Errorf("%s: %s is not a documented variable of %s", name, k, binary)
			}
		}
		for _, k := range required[binary] {
			if s.Environment[k] == "" {
				t.Errorf("%s: %s must be set in a deployment", name, k)
			}
		}
		listens := map[string]bool{}
		for k, v := range s.Environment {
			if strings.HasSuffix(k, "_ADDR") {
				host, port, err := net.SplitHostPort(v)
				if err != nil || host != "0.0.0.0" {
					t.Errorf("%s: %s=%s must listen on 0.0.0.0 to be reachable from other containers", name, k, v)
				}
				listens[port] = true
			}
			for _, host := range hostsIn(k, v) {
				if _, ok := services[host]; !ok {
					t.Errorf("%s: %s points at %q, which is not a service", name, k, host)
				} else if _, ok := s.DependsOn[host]; !ok {
					t.Errorf("%s: uses %s but does not depend on it", name, host)
				}
			}
		}
		for _, p := range s.Ports {
			if container := p[strings.LastIndexByte(p, ':')+1:]; !listens[container] {
				t.Errorf("%s: publishes %s but nothing listens on %s", name, p, container)
			}
		}
	}
	return counts
}

// hostsIn returns the hosts a variable's value points at (URLs and
// comma-separated host:port lists).
func hostsIn(k, v string) []string {
	switch {
	case strings.HasSuffix(k, "_URL"):
		u, err := url.Parse(v)
		if err != nil {
			return []string{"unparseable " + v}
		}
		return []string{u.Hostname()}
	case k == "SLUICE_GLOBAL_KAFKA":
		brokers, err := regions.ParseBrokers(v)
		if err != nil {
			return []string{"unparseable " + v}
		}
		var hosts []string
		for _, bs := range brokers {
			for _, b := range bs {
				h, _, _ := net.SplitHostPort(b)
				hosts = append(hosts, h)
			}
		}
		slices.Sort(hosts)
		return slices.Compact(hosts)
	case k == "KAFKA_BROKERS":
		var hosts []string
		for _, b := range strings.Split(v, ",") {
			h, _, _ := net.SplitHostPort(b)
			hosts = append(hosts, h)
		}
		return slices.Compact(hosts)
	}
	return nil
}

func TestDocumentedEnvIsRead(t *testing.T) {
	t.Parallel()
	// The parser above finds what the binaries document, including
	// environment-only variables.
	env := documentedEnv(t, "dataplane")
	for _, k := range []string{"SLUICE_DATAPLANE_ADDR", "REDIS_URL", "SLUICE_DECIDER_KEY", "KAFKA_BROKERS"} {
		if !env[k] {
			t.Errorf("dataplane's %s not found", k)
		}
	}
}

// Every flag a server binary defines, with the variable it falls back
// to, is in the binary's doc comment and in docs/configuration.md: a new
// flag cannot go undocumented.
func TestEveryFlagIsDocumented(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(filepath.Join(root(t), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`fs\.(?:String|Bool|Duration|Int|Float64)(?:Var)?\((?:&[\w.]+,\s*)?"([a-z0-9-]+)",\s*(?:env|e\.[A-Za-z]+)\("([A-Z0-9_]+)"`)
	for _, binary := range []string{"controlplane", "dataplane", "analytics"} {
		src, err := os.ReadFile(filepath.Join(root(t), configSource[binary]))
		if err != nil {
			t.Fatal(err)
		}
		flags := def.FindAllStringSubmatch(string(src), -1)
		all := regexp.MustCompile(`fs\.(?:String|Bool|Duration|Int|Float64|Var|Func|TextVar)(?:Var)?\(`).FindAllIndex(src, -1)
		if len(flags) == 0 || len(flags) != len(all) {
			t.Fatalf("%s: %d flags read of %d defined: is one defined another way?", configSource[binary], len(flags), len(all))
		}
		if binary != "controlplane" { // both Kafka clients: internal/kafkasec's flags too
			sec, err := os.ReadFile(filepath.Join(root(t), "internal", "kafkasec", "kafkasec.go"))
			if err != nil {
				t.Fatal(err)
			}
			secFlags := regexp.MustCompile(`fs\.(?:String|Bool)Var\(&c\.\w+, "([a-z0-9-]+)", (?:e|env\.Bool)\("([A-Z0-9_]+)"`).FindAllStringSubmatch(string(sec), -1)
			if len(secFlags) != 6 {
				t.Fatalf("internal/kafkasec: %d flags read, want 6: is one defined another way?", len(secFlags))
			}
			flags = append(flags, secFlags...)
		}
		for _, f := range flags {
			name, env := f[1], f[2]
			doc := regexp.MustCompile(`(?m)^//\t-` + regexp.QuoteMeta(name) + `\s+` + env + `\s`)
			if !doc.Match(src) {
				t.Errorf("%s: -%s (%s) is not in the doc comment", configSource[binary], name, env)
			}
			if !strings.Contains(string(conf), "| `-"+name+"` | `"+env+"` |") {
				t.Errorf("docs/configuration.md: no row for %s's -%s (%s)", binary, name, env)
			}
		}
	}
}

// `docker compose up` runs as the README writes it, with no variable
// set: every variable docker-compose.yml reads has a default
// (${NAME:-value}), none is mandatory (${NAME:?...}) or left empty.
// The two-region example holds to the binaries' configuration as the main
// file does: a decider per region, each naming its region and every
// region's Kafka, and an analytics consumer per region, each in a group
// of its own.
func TestRegionsComposeMatchesTheBinariesConfiguration(t *testing.T) {
	t.Parallel()
	services := loadComposeFile(t, "deploy/regions/docker-compose.yml")
	counts := checkServices(t, services)
	if counts["controlplane"] != 1 || counts["dataplane"] != 2 || counts["analytics"] != 2 {
		t.Errorf("services per binary %v, want a control plane, and a decider and analytics per region", counts)
	}
	seen, groups := map[string]bool{}, map[string]bool{}
	for name, s := range services {
		switch {
		case len(s.Command) == 0:
		case s.Command[0] == "dataplane":
			region := s.Environment["SLUICE_REGION"]
			brokers, err := regions.ParseBrokers(s.Environment["SLUICE_GLOBAL_KAFKA"])
			if err != nil || region == "" || len(brokers) != 2 || len(brokers[region]) == 0 || seen[region] {
				t.Errorf("%s: region %q, global Kafka %v (%v)", name, region, brokers, err)
			}
			seen[region] = true
		case s.Command[0] == "analytics":
			if g := s.Environment["SLUICE_ANALYTICS_GROUP"]; g == "" || groups[g] {
				t.Errorf("%s: consumer group %q: one of its own per region", name, g)
			} else {
				groups[g] = true
			}
		}
	}
}

func TestComposeNeedsNoVariables(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`\$\{([A-Z0-9_]+)([^}]*)\}`).FindAllStringSubmatch(string(b), -1)
	for _, r := range refs {
		if !strings.HasPrefix(r[2], ":-") || len(r[2]) == 2 {
			t.Errorf("docker-compose.yml reads ${%s%s}: give it a default, ${%s:-value}", r[1], r[2], r[1])
		}
	}
	if len(refs) == 0 {
		t.Fatal("docker-compose.yml reads no variable: the keys' defaults are gone?")
	}
}

// docker compose config validates the file with no variable set, where a
// compose tool is installed (.ci/run installs one): docker compose up
// runs as the README writes it.
func TestComposeConfigValidates(t *testing.T) {
	t.Parallel()
	var compose []string
	switch {
	case exec.Command("docker", "compose", "version").Run() == nil:
		compose = []string{"docker", "compose"}
	case func() bool { _, err := exec.LookPath("docker-compose"); return err == nil }():
		compose = []string{"docker-compose"}
	default:
		t.Skip("no docker compose here")
	}
	for _, file := range []string{"docker-compose.yml", "deploy/regions/docker-compose.yml"} {
		cmd := exec.Command(compose[0], append(compose[1:], "-f", file, "config", "-q")...)
		cmd.Dir = root(t)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "SLUICE_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v with no SLUICE_ variable set: %v\n%s", cmd.Args, err, out)
		}
	}
}
