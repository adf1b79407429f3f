package deploy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/flagenv"
)

type k8sObject struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		// A Deployment's selector is {matchLabels: …}; a Service's, the labels.
		Selector map[string]any
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				Containers []k8sContainer
				Volumes    []struct {
					Name   string
					Secret *struct {
						SecretName string `yaml:"secretName"`
						Items      []struct{ Key, Path string }
					}
				}
			}
		}
		// A Service's.
		Ports []servicePort
	}
}

type servicePort struct {
	Name       string
	Port       int
	TargetPort string `yaml:"targetPort"`
}

type probe struct {
	HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
}

type containerPort struct {
	Name          string
	ContainerPort int `yaml:"containerPort"`
}

// labels reads a selector: matchLabels when it has them, else itself.
func labels(selector map[string]any) map[string]string {
	if m, ok := selector["matchLabels"].(map[string]any); ok {
		selector = m
	}
	out := map[string]string{}
	for k, v := range selector {
		out[k], _ = v.(string)
	}
	return out
}

type k8sContainer struct {
	Name    string
	Command []string
	Env     []struct {
		Name, Value string
		ValueFrom   *struct {
			ConfigMapKeyRef struct{ Name, Key string } `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	}
	Ports          []containerPort
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func loadKubernetes(t *testing.T, file string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "deploy", "kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	var out []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
}

// The Kubernetes manifests run each binary on the variables it documents
// (a secret as NAME_FILE, a file of a mounted Secret), with what a
// deployment needs, listening where its probes, ports and Services look,
// and the deciders reaching the control plane's Service.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objects := loadKubernetes(t, "sluice.yaml")
	binaries, _ := checkDeployments(t, objects, objects)
	if binaries["controlplane"] != 1 || binaries["dataplane"] != 1 || binaries["analytics"] != 1 {
		t.Errorf("deployments per binary %v", binaries)
	}
}

// The sidecar example passes the same checks, against sluice.yaml's
// ConfigMap and Services, and its decider syncs with the check key it
// proxies for, in front of an application on localhost.
func TestKubernetesSidecar(t *testing.T) {
	t.Parallel()
	objects := loadKubernetes(t, "sidecar.yaml")
	binaries, env := checkDeployments(t, objects, append(loadKubernetes(t, "sluice.yaml"), objects...))
	if binaries["dataplane"] != 1 || len(binaries) != 1 {
		t.Fatalf("deployments per binary %v, want one decider", binaries)
	}
	e := env["dataplane"]
	if e["SLUICE_PROXY_KEY_FILE"] == "" || e["SLUICE_DECIDER_KEY_FILE"] != e["SLUICE_PROXY_KEY_FILE"] {
		t.Errorf("the sidecar's config credential %q, want its proxy's check key %q", e["SLUICE_DECIDER_KEY_FILE"], e["SLUICE_PROXY_KEY_FILE"])
	}
	if u, err := url.Parse(e["SLUICE_UPSTREAM"]); err != nil || u.Hostname() != "127.0.0.1" {
		t.Errorf("SLUICE_UPSTREAM=%s: want the application in the pod, on 127.0.0.1", e["SLUICE_UPSTREAM"])
	}
}

// The example of a further region runs a decider that knows its region
// and every region's Kafka, its own included, and an analytics consumer
// of a group of its own, reaching the home region's control plane by a
// Service of this cluster.
func TestKubernetesRegion(t *testing.T) {
	t.Parallel()
	objects := loadKubernetes(t, "regions.yaml")
	binaries, env := checkDeployments(t, objects, objects)
	if binaries["dataplane"] != 1 || binaries["analytics"] != 1 || len(binaries) != 2 {
		t.Fatalf("deployments per binary %v, want a decider and an analytics consumer", binaries)
	}
	d, a := env["dataplane"], env["analytics"]
	region := d["SLUICE_REGION"]
	if region == "" || !strings.Contains(";"+d["SLUICE_GLOBAL_KAFKA"], ";"+region+"=") || strings.Count(d["SLUICE_GLOBAL_KAFKA"], "=") < 2 {
		t.Errorf("SLUICE_REGION=%q, SLUICE_GLOBAL_KAFKA=%q: want the region among two or more", region, d["SLUICE_GLOBAL_KAFKA"])
	}
	if g := a["SLUICE_ANALYTICS_GROUP"]; !strings.Contains(g, region) {
		t.Errorf("SLUICE_ANALYTICS_GROUP=%q: want a group of region %s's own", g, region)
	}
}

// checkDeployments checks the Deployments of objects (their containers
// that run a Sluice binary) against the ConfigMaps and Services of all,
// and returns how many Deployments run each binary and the variables each
// binary's container is given (the last one's).
func checkDeployments(t *testing.T, objects, all []k8sObject) (binaries map[string]int, env map[string]map[string]string) {
	t.Helper()
	configMaps, services := map[string]map[string]string{}, map[string]k8sObject{}
	for _, o := range all {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Service":
			services[o.Metadata.Name] = o
		}
	}
	binaries, env = map[string]int{}, map[string]map[string]string{}
	for _, o := range objects {
		if o.Kind != "Deployment" {
			continue
		}
		pod := o.Spec.Template
		for k, v := range labels(o.Spec.Selector) {
			if pod.Metadata.Labels[k] != v {
				t.Errorf("%s: the selector's %s=%s is not on its pods", o.Metadata.Name, k, v)
			}
		}
		for _, c := range pod.Spec.Containers {
			if len(c.Command) == 0 || !slices.Contains([]string{"controlplane", "dataplane", "analytics"}, c.Command[0]) {
				continue // the application beside a sidecar
			}
			binary := c.Command[0]
			binaries[binary]++
			documented := documentedEnv(t, binary)
			set := map[string]string{}
			for _, e := range c.Env {
				value := e.Value
				if ref := e.ValueFrom; ref != nil {
					value = configMaps[ref.ConfigMapKeyRef.Name][ref.ConfigMapKeyRef.Key]
					if value == "" {
						t.Errorf("%s: %s names ConfigMap %s's %s, which holds nothing", o.Metadata.Name, e.Name, ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
					}
				}
				set[e.Name] = value
				base, isFile := strings.CutSuffix(e.Name, "_FILE")
				secretFile := isFile && slices.Contains(flagenv.SecretNames, base)
				if !documented[e.Name] && !(secretFile && documented[base]) {
					t.Errorf("%s: %s is not a documented variable of %s", o.Metadata.Name, e.Name, binary)
				}
				if secretFile {
					checkSecretFile(t, o, c, e.Name, value)
				}
			}
			for _, k := range required[binary] {
				if set[k] == "" && set[k+"_FILE"] == "" {
					t.Errorf("%s: %s must be set (or %s_FILE)", o.Metadata.Name, k, k)
				}
			}
			ports := map[string]int{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			listens := map[int]bool{}
			env[binary] = set
			for k, v := range set {
				if !strings.HasSuffix(k, "_ADDR") || v == "off" {
					continue
				}
				host, port, err := net.SplitHostPort(v)
				if err != nil || host != "0.0.0.0" {
					t.Errorf("%s: %s=%s must listen on 0.0.0.0", o.Metadata.Name, k, v)
				}
				n, _ := strconv.Atoi(port)
				listens[n] = true
			}
			for name, p := range ports {
				if !listens[p] {
					t.Errorf("%s: port %s (%d) is not one it listens on", o.Metadata.Name, name, p)
				}
			}
			if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
				ports[c.ReadinessProbe.HTTPGet.Port] == 0 || ports[c.LivenessProbe.HTTPGet.Port] == 0 {
				t.Errorf("%s: probes %+v / %+v: want /readyz and /healthz on a named port", o.Metadata.Name, c.ReadinessProbe, c.LivenessProbe)
			}
			if cp := set["SLUICE_CONTROL_PLANE_URL"]; cp != "" {
				u, err := url.Parse(cp)
				svc, ok := services[u.Hostname()]
				if err != nil || !ok || !slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool { return strconv.Itoa(p.Port) == u.Port() }) {
					t.Errorf("%s: SLUICE_CONTROL_PLANE_URL=%s is not a Service's port", o.Metadata.Name, cp)
				}
			}
		}
		// The Services in front of it reach ports it names.
		for _, svc := range services {
			if !matches(labels(svc.Spec.Selector), pod.Metadata.Labels) {
				continue
			}
			for _, p := range svc.Spec.Ports {
				if !slices.ContainsFunc(pod.Spec.Containers, func(c k8sContainer) bool {
					return slices.ContainsFunc(c.Ports, func(cp containerPort) bool { return cp.Name == p.TargetPort })
				}) {
					t.Errorf("Service %s: target port %s is not a port of %s", svc.Metadata.Name, p.TargetPort, o.Metadata.Name)
				}
			}
		}
	}
	return binaries, env
}

// checkSecretFile fails t unless file is a file of a Secret volume mounted
// in c.
func checkSecretFile(t *testing.T, o k8sObject, c k8sContainer, variable, file string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 || slices.ContainsFunc(v.Secret.Items, func(i struct{ Key, Path string }) bool { return i.Path == path.Base(file) }) {
				return
			}
		}
	}
	t.Errorf("%s: %s=%s is not a file of a mounted Secret", o.Metadata.Name, variable, file)
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}
