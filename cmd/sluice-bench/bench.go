package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/flagenv"
	gubernatorpb "github.com/sluicehq/sluice/internal/gen/pb/gubernator"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/grpcload"
	"github.com/sluicehq/sluice/sluiceclient"
)

// benchResult is what `sluice bench` measured.
type benchResult struct {
	Decisions      int64   `json:"decisions"`
	Allowed        int64   `json:"allowed"`
	Rejected       int64   `json:"rejected"`
	Errors         int64   `json:"errors"`
	Seconds        float64 `json:"seconds"`
	DecisionsPerS  float64 `json:"decisions_per_second"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	Concurrency    int     `json:"concurrency"`
	Keys           int     `json:"keys"`
	Protocol       string  `json:"protocol"`
	FirstErrorText string  `json:"first_error,omitempty"`
	// ServerCPUus and RedisCPUus are the CPU time the process -pid and
	// the Redis -redis took per decision during the run, in µs.
	ServerCPUus float64 `json:"server_cpu_us_per_decision,omitempty"`
	RedisCPUus  float64 `json:"redis_cpu_us_per_decision,omitempty"`
}

// runBench loads a decider with checks from concurrent clients over a set
// of client ids and reports decisions/s and latency percentiles.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := flagenv.NewEnv(getenv)
	decider := fs.String("decider", env.String("SLUICE_DECIDER", defaultAddress), "decider URL, for HTTP (env SLUICE_DECIDER)")
	grpcAddr := fs.String("grpc", "", "benchmark DecisionService on this grpc-go address (host:port) instead of HTTP")
	coalesce := fs.Bool("coalesce", false, "check through the Go SDK with Coalesce: concurrent checks share CheckBatch calls to -decider")
	rlsAddr := fs.String("rls", "", "benchmark Envoy's rate limit service (ShouldRateLimit) on this gRPC address instead: any RLS server, Sluice's or another")
	domain := fs.String("domain", "", "with -rls: the request's domain (Sluice: the tenant's slug)")
	gubAddr := fs.String("gubernator", "", "benchmark gubernator's GetRateLimits on this gRPC address instead: gubernator's own, or a Sluice decider's; one request a call, 10^6 a second per client id, so that every check is admitted")
	conc := fs.Int("c", 50, "concurrent clients")
	keys := fs.Int("keys", 10_000, "distinct client ids")
	n := fs.Int("n", 100_000, "checks in all")
	raw := fs.Bool("raw", false, "with -grpc or -rls: send the calls as raw HTTP/2 frames on 2 connections (internal/grpcload), a fraction of grpc-go's client CPU per call")
	asJSON := fs.Bool("json", false, "print JSON")
	var probe cpuProbe
	fs.IntVar(&probe.pid, "pid", 0, "also report the CPU this process (the server under load: a decider, envoyproxy/ratelimit) takes per decision, from /proc (Linux)")
	fs.StringVar(&probe.redis, "redis", "", "also report the CPU the Redis at this host:port takes per decision, from INFO cpu")
	if err := fs.Parse(args); err != nil || *conc < 1 || *keys < 1 || *n < 1 || (*rlsAddr != "") != (*domain != "") ||
		(*raw && *rlsAddr == "" && *grpcAddr == "" && *gubAddr == "") || probe.pid < 0 || fs.NArg() > 0 {
		fmt.Fprint(stderr, benchUsage)
		return errUsage
	}
	key := getenv("SLUICE_CHECK_KEY")
	if key == "" && *rlsAddr == "" && *gubAddr == "" { // those two need one for Sluice's only
		fmt.Fprint(stderr, "set SLUICE_CHECK_KEY to a check key\n")
		return errUsage
	}
	if *raw {
		before, err := probe.read(ctx)
		if err != nil {
			return err
		}
		res, err := runRaw(ctx, rawTarget{rls: *rlsAddr, domain: *domain, grpc: *grpcAddr, gubernator: *gubAddr}, key, *conc, *keys, *n)
		if err != nil {
			return err
		}
		if err := probe.report(ctx, before, &res); err != nil {
			return err
		}
		return printBench(stdout, *asJSON, res)
	}
	var check func(context.Context, string) (bool, error)
	var protocol string
	var closeFn func()
	var err error
	switch {
	case *rlsAddr != "":
		check, protocol, closeFn, err = rlsTarget(*rlsAddr, *domain, key)
	case *gubAddr != "":
		check, protocol, closeFn, err = gubernatorTarget(*gubAddr, key)
	default:
		check, protocol, closeFn, err = benchTarget(*decider, *grpcAddr, *coalesce, key, *conc)
	}
	if err != nil {
		return err
	}
	defer closeFn()

	res := benchResult{Concurrency: *conc, Keys: *keys, Protocol: protocol}
	var next atomic.Int64
	var allowed, rejected, errs atomic.Int64
	var firstErr atomic.Value
	lats := make([][]time.Duration, *conc)
	var wg sync.WaitGroup
	before, err := probe.read(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for g := range *conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(*n) {
					return
				}
				t := time.Now()
				ok, err := check(ctx, "bench-"+strconv.FormatInt(i%int64(*keys), 10))
				lats[g] = append(lats[g], time.Since(t))
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case ok:
					allowed.Add(1)
				default:
					rejected.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lats...)
	slices.Sort(all)
	res.Decisions, res.Allowed, res.Rejected, res.Errors = int64(len(all)), allowed.Load(), rejected.Load(), errs.Load()
	res.Seconds = elapsed.Seconds()
	res.DecisionsPerS = float64(len(all)) / elapsed.Seconds()
	if len(all) > 0 {
		res.P50ms = float64(all[len(all)/2].Microseconds()) / 1000
		res.P99ms = float64(all[len(all)*99/100].Microseconds()) / 1000
	}
	if s, ok := firstErr.Load().(string); ok {
		res.FirstErrorText = s
	}
	if err := probe.report(ctx, before, &res); err != nil {
		return err
	}
	return printBench(stdout, *asJSON, res)
}

// printBench prints what `sluice bench` measured.
func printBench(w io.Writer, asJSON bool, res benchResult) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(w, "%d checks over %s (%d clients, %d client ids) in %.1fs\n", res.Decisions, res.Protocol, res.Concurrency, res.Keys, res.Seconds)
	fmt.Fprintf(w, "%.0f decisions/s, p50 %.2f ms, p99 %.2f ms\n", res.DecisionsPerS, res.P50ms, res.P99ms)
	fmt.Fprintf(w, "%d allowed, %d rejected, %d errors\n", res.Allowed, res.Rejected, res.Errors)
	if res.FirstErrorText != "" {
		fmt.Fprintf(w, "first error: %s\n", res.FirstErrorText)
	}
	if res.ServerCPUus > 0 {
		fmt.Fprintf(w, "server CPU %.2f µs per decision\n", res.ServerCPUus)
	}
	if res.RedisCPUus > 0 {
		fmt.Fprintf(w, "Redis CPU %.2f µs per decision\n", res.RedisCPUus)
	}
	return nil
}

const benchUsage = "usage: sluice bench [-decider URL [-coalesce] | -grpc HOST:PORT [-raw] | -rls HOST:PORT -domain D [-raw] | -gubernator HOST:PORT [-raw]] [-c 50] [-keys 10000] [-n 100000] [-pid PID] [-redis HOST:PORT] [-json]\n"

// rawTarget is what `sluice bench -raw` loads: Envoy's ShouldRateLimit at
// rls (in domain), gubernator's GetRateLimits at gubernator, else
// DecisionService.Check at grpc.
type rawTarget struct{ rls, domain, grpc, gubernator string }

// gubernatorBenchRequest is one check of id in gubernator's terms: a hit
// of a limit of 10^6 a second, which the load never reaches.
func gubernatorBenchRequest(id string) *gubernatorpb.GetRateLimitsReq {
	return &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{{Name: "bench", UniqueKey: id, Hits: 1, Limit: 1_000_000, Duration: 1000}}}
}

// gubernatorAllowed reports whether a GetRateLimits answer admitted its
// one request.
func gubernatorAllowed(r *gubernatorpb.GetRateLimitsResp) bool {
	return len(r.GetResponses()) == 1 && r.Responses[0].GetError() == "" && r.Responses[0].GetStatus() == gubernatorpb.Status_UNDER_LIMIT
}

// runRaw is `sluice bench -raw`: n calls of DecisionService.Check (at
// grpcAddr) or Envoy's ShouldRateLimit (at rlsAddr, in domain) over keys
// client ids, conc in flight on two connections, sent by grpcload.
func runRaw(ctx context.Context, to rawTarget, key string, conc, keys, n int) (benchResult, error) {
	// conc rounded down to an even number split over the two connections.
	cfg := grpcload.Config{Conns: min(2, conc), Streams: max(1, conc/2), Calls: int64(n)}
	if key != "" {
		cfg.Metadata = []string{"authorization", "Bearer " + key}
	}
	res := benchResult{Concurrency: cfg.Conns * cfg.Streams, Keys: keys}
	for i := range keys {
		id := "bench-" + strconv.Itoa(i)
		var m proto.Message = &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: id}}}
		switch {
		case to.rls != "":
			m = &rlsv3.RateLimitRequest{Domain: to.domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client_id", Value: id}}}}}
		case to.gubernator != "":
			m = gubernatorBenchRequest(id)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return res, err
		}
		cfg.Messages = append(cfg.Messages, b)
	}
	switch {
	case to.rls != "":
		cfg.Addr, cfg.Method, res.Protocol = to.rls, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, "Envoy RLS (raw HTTP/2) "+to.rls
		cfg.Classify = func(msg []byte) bool {
			var r rlsv3.RateLimitResponse
			return proto.Unmarshal(msg, &r) == nil && r.OverallCode == rlsv3.RateLimitResponse_OK
		}
	case to.gubernator != "":
		cfg.Addr, cfg.Method, res.Protocol = to.gubernator, gubernatorpb.V1_GetRateLimits_FullMethodName, "gubernator GetRateLimits (raw HTTP/2) "+to.gubernator
		cfg.Classify = func(msg []byte) bool {
			var r gubernatorpb.GetRateLimitsResp
			return proto.Unmarshal(msg, &r) == nil && gubernatorAllowed(&r)
		}
	default:
		cfg.Addr, cfg.Method, res.Protocol = to.grpc, sluicev1.DecisionService_Check_FullMethodName, "gRPC (raw HTTP/2) "+to.grpc
		cfg.Classify = func(msg []byte) bool {
			var r sluicev1.CheckResponse
			return proto.Unmarshal(msg, &r) == nil && r.Allowed
		}
	}
	out, err := grpcload.Run(ctx, cfg)
	if err != nil {
		return res, err
	}
	res.Decisions, res.Allowed, res.Errors = out.Calls, out.Matched, out.Failed
	res.Rejected = out.Calls - out.Matched - out.Failed
	res.Seconds = out.Elapsed.Seconds()
	res.DecisionsPerS = float64(out.Calls) / out.Elapsed.Seconds()
	res.P50ms = float64(out.Percentile(0.5).Microseconds()) / 1000
	res.P99ms = float64(out.Percentile(0.99).Microseconds()) / 1000
	res.FirstErrorText = out.FirstErr
	return res, nil
}

// rlsTarget returns one check through Envoy's rate limit service at addr:
// a request of one descriptor, client_id, in domain, carrying key (when
// set) as Envoy's initial metadata would. It speaks the protocol only, so
// it measures any RLS server the same way.
func rlsTarget(addr, domain, key string) (func(context.Context, string) (bool, error), string, func(), error) {
	conn, withKey, err := dialBench(addr, key)
	if err != nil {
		return nil, "", nil, err
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	return func(ctx context.Context, id string) (bool, error) {
		res, err := client.ShouldRateLimit(withKey(ctx), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client_id", Value: id}}}}})
		if err != nil {
			return false, err
		}
		return res.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
	}, "Envoy RLS " + addr, func() { conn.Close() }, nil
}

// dialBench connects to the gRPC server at addr (plaintext), and returns
// what puts key, when set, in a call's metadata as a bearer token.
func dialBench(addr, key string) (*grpc.ClientConn, func(context.Context) context.Context, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	var md metadata.MD
	if key != "" {
		md = metadata.Pairs("authorization", "Bearer "+key)
	}
	return conn, func(ctx context.Context) context.Context { return metadata.NewOutgoingContext(ctx, md) }, nil
}

// gubernatorTarget returns one check through gubernator's GetRateLimits at
// addr (gubernator's, or a decider's carrying key when set).
func gubernatorTarget(addr, key string) (func(context.Context, string) (bool, error), string, func(), error) {
	conn, withKey, err := dialBench(addr, key)
	if err != nil {
		return nil, "", nil, err
	}
	client := gubernatorpb.NewV1Client(conn)
	return func(ctx context.Context, id string) (bool, error) {
		res, err := client.GetRateLimits(withKey(ctx), gubernatorBenchRequest(id))
		if err != nil {
			return false, err
		}
		if len(res.GetResponses()) == 1 && res.Responses[0].GetError() != "" {
			return false, errors.New(res.Responses[0].GetError())
		}
		return gubernatorAllowed(res), nil
	}, "gubernator GetRateLimits " + addr, func() { conn.Close() }, nil
}

// benchTarget returns one check against the decider over HTTP, grpc-go or
// the coalescing Go SDK.
func benchTarget(decider, grpcAddr string, coalesce bool, key string, conc int) (func(context.Context, string) (bool, error), string, func(), error) {
	if coalesce {
		// No deny cache: every check is the decider's to answer.
		c := sluiceclient.New(sluiceclient.Config{URL: decider, Key: key, Coalesce: true, DenyCacheSize: -1, Timeout: 10 * time.Second})
		return func(ctx context.Context, id string) (bool, error) {
			d, err := c.Check(ctx, sluiceclient.Request{Descriptors: map[string]string{"client_id": id}})
			return d.Allowed, err
		}, "coalesced CheckBatch " + decider, c.Close, nil
	}
	if grpcAddr != "" {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, "", nil, err
		}
		client := sluicev1.NewDecisionServiceClient(conn)
		md := metadata.Pairs("authorization", "Bearer "+key)
		return func(ctx context.Context, id string) (bool, error) {
			res, err := client.Check(metadata.NewOutgoingContext(ctx, md), &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: id}}})
			if err != nil {
				return false, err
			}
			return res.Allowed, nil
		}, "gRPC " + grpcAddr, func() { conn.Close() }, nil
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}, Timeout: 10 * time.Second}
	url := decider + "/v1/check"
	return func(ctx context.Context, id string) (bool, error) {
		body, _ := json.Marshal(map[string]any{"descriptors": map[string]string{"client_id": id}})
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	}, "HTTP " + decider, client.CloseIdleConnections, nil
}
