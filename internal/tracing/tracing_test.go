package tracing

import (
	"context"
	"strings"
	"testing"
)

func TestSetupWithoutACollectorTracesNothing(t *testing.T) {
	t.Parallel()
	tr, shutdown, err := Setup(context.Background(), "s", func(string) string { return "" })
	if err != nil || tr != nil {
		t.Fatalf("no endpoint: tracer %v, %v", tr, err)
	}
	shutdown()
	ctx := context.Background()
	if got, span := Start(ctx, nil, "x", nil); got != ctx || span.IsRecording() {
		t.Fatal("a nil tracer started a span")
	}
}

// Bad settings stop the start with an error naming the variable, never
// the headers' values (API keys).
func TestSetupRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, value, want string }{
		{"OTEL_TRACES_SAMPLER", "sometimes", "OTEL_TRACES_SAMPLER"},
		{"OTEL_TRACES_SAMPLER_ARG", "2", "OTEL_TRACES_SAMPLER_ARG"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "secret-api-key", "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", tc.key: tc.value}
		_, _, err := Setup(context.Background(), "s", func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s=%s: %v", tc.key, tc.value, err)
		}
	}
}

func TestSamplers(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"":                         "ParentBased{root:AlwaysOnSampler",
		"always_off":               "AlwaysOffSampler",
		"parentbased_traceidratio": "ParentBased{root:TraceIDRatioBased{0.25}",
		"traceidratio":             "TraceIDRatioBased{0.25}",
	} {
		s, err := samplerOf(name, "0.25")
		if err != nil || !strings.HasPrefix(s.Description(), want) {
			t.Errorf("%q: %v, %v; want %s…", name, s, err, want)
		}
	}
}
