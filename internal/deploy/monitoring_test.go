package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// exportedMetrics are the metric names the binaries register: every
// "sluice_…" string literal of the non-test Go sources, with the series a
// histogram adds.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	literal := regexp.MustCompile(`"(sluice_[a-z0-9_]+)"`)
	err := filepath.WalkDir(root(t), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// checkExpr fails t when expr names a metric the binaries do not export,
// or its brackets do not balance.
func checkExpr(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	used := regexp.MustCompile(`\bsluice_[a-z0-9_]+`).FindAllString(expr, -1)
	if len(used) == 0 {
		t.Errorf("%s: %q names no Sluice metric", where, expr)
	}
	for _, m := range used {
		if !exported[m] {
			t.Errorf("%s: %q names %s, which no binary exports", where, expr, m)
		}
	}
	depth, lowest := 0, 0
	for _, r := range expr {
		switch r {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		}
		lowest = min(lowest, depth)
	}
	if depth != 0 || lowest < 0 {
		t.Errorf("%s: %q: unbalanced brackets", where, expr)
	}
}

// The alerting rules load as Prometheus rule groups, each alert named,
// with a severity and a summary, on metrics the binaries export.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || slices.Contains(alerts, r.Alert) {
				t.Errorf("group %s: an alert without a name, or named twice: %q", g.Name, r.Alert)
			}
			alerts = append(alerts, r.Alert)
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) || r.Annotations["summary"] == "" {
				t.Errorf("%s: severity %q, summary %q", r.Alert, r.Labels["severity"], r.Annotations["summary"])
			}
			checkExpr(t, r.Alert, r.Expr, exported)
		}
	}
	if len(alerts) < 10 {
		t.Fatalf("%d alerts", len(alerts))
	}
}

// The Grafana dashboard is JSON whose every query is on metrics the
// binaries export.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "deploy", "grafana", "sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("uid %q, %d panels", d.UID, len(d.Panels))
	}
	exported := exportedMetrics(t)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, p.Title, q.Expr, exported)
		}
	}
}

// volumes are a compose service's bind mounts, host path (from the
// repository root) to container path.
func volumes(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct{ Volumes []string }
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range f.Services[name].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
			out[strings.TrimPrefix(parts[0], "./")] = parts[1]
		}
	}
	return out
}

// In docker-compose.yml, Prometheus scrapes every Sluice service on the
// port it listens on (its *_ADDR), with the alerting rules mounted where
// its configuration loads them; Grafana reads that Prometheus and the
// dashboard.
func TestComposeMonitoring(t *testing.T) {
	t.Parallel()
	services := loadCompose(t)
	promMounts := volumes(t, "prometheus")
	if promMounts["deploy/prometheus"] != "/etc/prometheus" {
		t.Fatalf("prometheus mounts %v", promMounts)
	}
	b, err := os.ReadFile(filepath.Join(root(t), "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prom.RuleFiles, []string{"/etc/prometheus/alerts.yml"}) {
		t.Errorf("rule_files %v: want the mounted alerts.yml", prom.RuleFiles)
	}
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				scraped[target] = true
			}
		}
	}
	for name, s := range services {
		if s.Build == nil {
			continue
		}
		for k, v := range s.Environment {
			// Metrics are on the admin listener where a binary has one.
			if _, admin := s.Environment["SLUICE_ADMIN_ADDR"]; admin && k != "SLUICE_ADMIN_ADDR" {
				continue
			}
			if strings.HasSuffix(k, "_ADDR") && k != "SLUICE_GRPC_ADDR" {
				port := v[strings.LastIndexByte(v, ':')+1:]
				if !scraped[name+":"+port] {
					t.Errorf("Prometheus does not scrape %s:%s (%s)", name, port, k)
				}
				delete(scraped, name+":"+port)
			}
		}
	}
	if len(scraped) != 0 {
		t.Errorf("Prometheus scrapes %v, which no service serves", scraped)
	}

	grafanaMounts := volumes(t, "grafana")
	if grafanaMounts["deploy/grafana/provisioning"] != "/etc/grafana/provisioning" || !strings.HasPrefix(grafanaMounts["deploy/grafana/sluice.json"], "/var/lib/grafana/dashboards/") {
		t.Fatalf("grafana mounts %v", grafanaMounts)
	}
	ds, err := os.ReadFile(filepath.Join(root(t), "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"))
	if err != nil || !strings.Contains(string(ds), "url: http://prometheus:9090") {
		t.Errorf("the Grafana datasource is not the compose Prometheus: %v", err)
	}
	dash, err := os.ReadFile(filepath.Join(root(t), "deploy", "grafana", "provisioning", "dashboards", "sluice.yml"))
	if err != nil || !strings.Contains(string(dash), "path: /var/lib/grafana/dashboards") {
		t.Errorf("the Grafana dashboard provider does not read the mounted dashboard: %v", err)
	}
}
