package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3" // the Any types envoy.yaml names
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// docs/envoy.yaml is a valid Envoy bootstrap as Envoy's own protos and
// their validation rules read it, typed configs included, wired to a
// decider's rate limit service under the tenant's domain.
func TestEnvoyExampleIsValid(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	validate := func(what string, m proto.Message) {
		t.Helper()
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
	}
	validate("bootstrap", &boot)
	unpack := func(a *anypb.Any) proto.Message {
		t.Helper()
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("typed config %s: %v", a.GetTypeUrl(), err)
		}
		validate(a.GetTypeUrl(), m)
		return m
	}
	var rateLimited, wired bool
	for _, l := range boot.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm, ok := unpack(f.GetTypedConfig()).(*hcmv3.HttpConnectionManager)
				if !ok {
					continue
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						rateLimited = rateLimited || len(r.GetRoute().GetRateLimits()) > 0
					}
				}
				for _, hf := range hcm.GetHttpFilters() {
					if rl, ok := unpack(hf.GetTypedConfig()).(interface {
						GetDomain() string
					}); ok && rl.GetDomain() == "demo" {
						wired = true
					}
				}
			}
		}
	}
	for _, c := range boot.GetStaticResources().GetClusters() {
		for _, o := range c.GetTypedExtensionProtocolOptions() {
			unpack(o)
		}
	}
	if !rateLimited || !wired {
		t.Fatalf("routes with rate limits %v, a rate limit filter for the demo tenant %v", rateLimited, wired)
	}
}
