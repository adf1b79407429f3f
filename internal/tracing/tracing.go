// Package tracing exports OpenTelemetry traces over OTLP/HTTP when the
// standard variables name a collector, so that a decision shows in the
// distributed trace of the request it decided (its parent taken from the
// W3C traceparent the caller sent). Without a collector, nothing is set up
// and the instrumented paths cost nothing: their Tracer is nil.
package tracing

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of Sluice's spans.
const Name = "github.com/sluicehq/sluice"

// Setup returns a tracer exporting spans of service over OTLP/HTTP to the
// collector that OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (a URL, used as it
// is) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, /v1/traces added) names,
// with OTEL_EXPORTER_OTLP_HEADERS (k=v,…: a vendor's API key) sent along,
// sampled as OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say (default
// parentbased_always_on), named OTEL_SERVICE_NAME or service. With neither
// endpoint set it returns a nil Tracer. shutdown sends what is buffered,
// within 5 s.
func Setup(ctx context.Context, service string, getenv func(string) string) (tr trace.Tracer, shutdown func(), err error) {
	noop := func() {}
	url := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if url == "" {
		if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			url = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	if url == "" {
		return nil, noop, nil
	}
	sampler, err := samplerOf(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, noop, err
	}
	headers, err := headersOf(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return nil, noop, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url), otlptracehttp.WithHeaders(headers))
	if err != nil {
		return nil, noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" {
		service = name
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	shutdown = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}
	return tp.Tracer(Name), shutdown, nil
}

// samplerOf is the sampler the OpenTelemetry variables name.
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// headersOf parses OTEL_EXPORTER_OTLP_HEADERS: k=v pairs, comma-separated.
// Its values (API keys) are never part of an error.
func headersOf(s string) (map[string]string, error) {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_HEADERS: want key=value pairs, comma-separated")
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// propagator reads W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Getter reads one header (or gRPC metadata) value of a request.
type Getter func(key string) string

// Get implements propagation.TextMapCarrier.
func (g Getter) Get(key string) string { return g(key) }

// Set implements propagation.TextMapCarrier; extraction never sets.
func (Getter) Set(string, string) {}

// Keys implements propagation.TextMapCarrier; W3C extraction asks by name.
func (Getter) Keys() []string { return nil }

// Extract returns ctx with the W3C trace context header reads.
func Extract(ctx context.Context, header Getter) context.Context {
	return propagator.Extract(ctx, header)
}

// Start starts a server span named name under the trace context the
// request carries (header reads it), or a new trace; with a nil tr it
// starts nothing and returns ctx and a span that records nothing.
func Start(ctx context.Context, tr trace.Tracer, name string, header Getter) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, trace.SpanFromContext(context.Background()) // the no-op span
	}
	if header != nil {
		ctx = propagator.Extract(ctx, header)
	}
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}
