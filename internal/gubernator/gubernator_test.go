package gubernator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	gubernatorpb "github.com/sluicehq/sluice/internal/gen/pb/gubernator"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/httpport/httpporttest"
	"google.golang.org/grpc"
)

// gubernator's GetRateLimits over gRPC, with a stub of its API as its
// clients have: each request its own limit per (name, unique_key), decided
// on its own; problems in a request's error, the others answered.
func TestGubernatorGetRateLimits(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	client := gubernatorpb.NewV1Client(serveGRPC(t, cfg))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	now := time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC) // testAPI's clock
	call := func(reqs ...*gubernatorpb.RateLimitReq) []*gubernatorpb.RateLimitResp {
		t.Helper()
		res, err := client.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: reqs})
		if err != nil || len(res.Responses) != len(reqs) {
			t.Fatalf("GetRateLimits: %v, %v", res, err)
		}
		return res.Responses
	}
	perMinute := func(key string, hits int64) *gubernatorpb.RateLimitReq {
		return &gubernatorpb.RateLimitReq{Name: "requests_per_min", UniqueKey: key, Hits: hits, Limit: 2, Duration: 60000}
	}
	leaky := &gubernatorpb.RateLimitReq{Name: "leaky", UniqueKey: "account:1", Hits: 1, Limit: 2, Duration: 1000, Algorithm: gubernatorpb.Algorithm_LEAKY_BUCKET}
	// A token bucket refills whole at the end of its duration: a fixed
	// window here, whose end (10:01) is the reset time.
	windowEnd := now.Truncate(time.Minute).Add(time.Minute).UnixMilli()
	for i, want := range []gubernatorpb.Status{gubernatorpb.Status_UNDER_LIMIT, gubernatorpb.Status_UNDER_LIMIT, gubernatorpb.Status_OVER_LIMIT} {
		res := call(perMinute("account:1", 1), leaky)
		if r := res[0]; r.Status != want || r.Limit != 2 || r.Remaining != int64(max(1-i, 0)) || r.ResetTime != windowEnd || r.Error != "" {
			t.Fatalf("call %d, the token bucket: %v; want %v, remaining %d, reset at %d", i, r, want, max(1-i, 0), windowEnd)
		}
		// The leaky bucket leaks 2 a second (the clock stands still): its
		// third hit is over, and it is full again half a second a hit later.
		if r := res[1]; r.Status != want || r.Remaining != int64(max(1-i, 0)) || r.ResetTime != now.Add(time.Duration(min(i+1, 2))*500*time.Millisecond).UnixMilli() {
			t.Fatalf("call %d, the leaky bucket: %v; want %v", i, r, want)
		}
	}
	// Another key is counted apart; no hits asks without taking; a
	// request that cannot be decided says why beside the others' answers.
	// (The requests of one call are decided at once, in no set order: the
	// look at account:2 comes in the next.)
	res := call(perMinute("account:2", 1), perMinute("account:3", 0), perMinute("account:1", 0),
		&gubernatorpb.RateLimitReq{Name: "x", UniqueKey: "", Hits: 1, Limit: 2, Duration: 1500},
		&gubernatorpb.RateLimitReq{Name: "x", UniqueKey: "y", Hits: 1, Limit: 2, Duration: 6, Behavior: gubernatorpb.Behavior_DURATION_IS_GREGORIAN},
		&gubernatorpb.RateLimitReq{Name: "x", UniqueKey: "y", Hits: 1, Limit: 2, Duration: 1000, Behavior: 1 << 12},
		&gubernatorpb.RateLimitReq{Name: "x", UniqueKey: "y\x00", Hits: 1, Limit: 2, Duration: 1000})
	if res[0].Status != gubernatorpb.Status_UNDER_LIMIT || res[0].Remaining != 1 || res[1].Remaining != 2 || res[1].Status != gubernatorpb.Status_UNDER_LIMIT {
		t.Fatalf("account:2, and a look at account:3: %v, %v", res[0], res[1])
	}
	if r := call(perMinute("account:2", 0))[0]; r.Status != gubernatorpb.Status_UNDER_LIMIT || r.Remaining != 1 {
		t.Fatalf("a look at account:2: %v", r)
	}
	if res[2].Status != gubernatorpb.Status_OVER_LIMIT || res[2].Remaining != 0 {
		t.Fatalf("a look at the spent account:1: %v", res[2])
	}
	for i, want := range map[int]string{
		3: "invalid rate limit request: unique_key: must be 1 to 256 bytes; duration: must be whole seconds: a multiple of 1000 milliseconds",
		4: "invalid rate limit request: duration: with DURATION_IS_GREGORIAN, 0 (minutes), 1 (hours), 2 (days), 3 (weeks), 4 (months) or 5 (years)",
		5: "invalid rate limit request: behavior: unknown flags",
		6: "invalid rate limit request: unique_key: must not contain NUL",
	} {
		if res[i].Error != want {
			t.Errorf("request %d: error %q, want %q", i, res[i].Error, want)
		}
	}
	// RESET_REMAINING starts the counter afresh: account:1 has its two again.
	reset := perMinute("account:1", 0)
	reset.Behavior = gubernatorpb.Behavior_RESET_REMAINING | gubernatorpb.Behavior_GLOBAL
	if r := call(reset)[0]; r.Status != gubernatorpb.Status_UNDER_LIMIT || r.Remaining != 2 || r.Error != "" {
		t.Fatalf("after RESET_REMAINING: %v", r)
	}
	// As gubernator: RESET_REMAINING removes a token bucket that was
	// counted in (here over its limit) and answers it whole, its reset time
	// 0, taking none of the request's hits; on a fresh bucket the hits are
	// taken from the full limit.
	call(perMinute("account:2", 2))
	reset = perMinute("account:2", 1)
	reset.Behavior = gubernatorpb.Behavior_RESET_REMAINING
	if r := call(reset)[0]; r.Status != gubernatorpb.Status_UNDER_LIMIT || r.Remaining != 2 || r.ResetTime != 0 {
		t.Fatalf("RESET_REMAINING of a bucket over its limit: %v, want UNDER_LIMIT, 2 remaining, reset time 0", r)
	}
	if r := call(perMinute("account:2", 1))[0]; r.Remaining != 1 {
		t.Fatalf("the request after RESET_REMAINING: %v, want 1 remaining (the reset took nothing)", r)
	}
	reset.UniqueKey = "account:3"
	if r := call(reset)[0]; r.Status != gubernatorpb.Status_UNDER_LIMIT || r.Remaining != 1 {
		t.Fatalf("RESET_REMAINING of a fresh bucket: %v, want its hit taken, 1 remaining", r)
	}
	// Over the limit, DRAIN_OVER_LIMIT takes what remains; without it, what
	// remains stays for smaller requests.
	for _, drain := range []bool{false, true} {
		key := fmt.Sprint("drained:", drain)
		big := perMinute(key, 5)
		if drain {
			big.Behavior = gubernatorpb.Behavior_DRAIN_OVER_LIMIT
		}
		call(perMinute(key, 1))
		if r := call(big)[0]; r.Status != gubernatorpb.Status_OVER_LIMIT || r.Remaining != map[bool]int64{false: 1, true: 0}[drain] {
			t.Fatalf("5 hits of the 1 left, drain %v: %v", drain, r)
		}
		if r := call(perMinute(key, 1))[0]; (r.Status == gubernatorpb.Status_OVER_LIMIT) != drain {
			t.Fatalf("the next hit, drain %v: %v", drain, r)
		}
	}
	// DURATION_IS_GREGORIAN of minutes: the window is the calendar's minute.
	gregorian := perMinute("account:4", 1)
	gregorian.Duration, gregorian.Behavior = 0, gubernatorpb.Behavior_DURATION_IS_GREGORIAN
	if r := call(gregorian)[0]; r.Remaining != 1 || r.ResetTime != windowEnd || r.Error != "" {
		t.Fatalf("a gregorian minute: %v, want the reset at %d", r, windowEnd)
	}
	// A day nothing has counted in yet resets at its end all the same.
	gregorian.Duration, gregorian.Hits = 2, 0
	if r := call(gregorian)[0]; r.Remaining != 2 || r.ResetTime != now.Truncate(24*time.Hour).Add(24*time.Hour).UnixMilli() {
		t.Fatalf("a gregorian day, untouched: %v", r)
	}
	// Weeks (from Monday), months and years are the calendar's, in UTC:
	// counted, and reset at the period's end.
	for d, end := range map[int64]time.Time{
		3: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), // Sunday the 22nd's week ends Monday the 23rd
		4: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		5: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		gregorian.Duration, gregorian.Hits = d, 0 // untouched: its end all the same
		if r := call(gregorian)[0]; r.Error != "" || r.Remaining != 2 || r.ResetTime != end.UnixMilli() {
			t.Fatalf("gregorian %d, untouched: %v, want the reset at %v", d, r, end)
		}
		gregorian.Hits = 2
		if r := call(gregorian)[0]; r.Error != "" || r.Remaining != 0 || r.Status != gubernatorpb.Status_UNDER_LIMIT || r.ResetTime != end.UnixMilli() {
			t.Fatalf("gregorian %d: %v, want its two taken and the reset at %v", d, r, end)
		}
		if r := call(gregorian)[0]; r.Status != gubernatorpb.Status_OVER_LIMIT {
			t.Fatalf("gregorian %d, the period spent: %v", d, r)
		}
	}

	// The call needs the tenant's check key, and a request or more.
	if _, err := client.GetRateLimits(context.Background(), &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{perMinute("a", 1)}}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a key: %v", err)
	}
	if res, err := client.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{}); err != nil || len(res.Responses) != 0 {
		t.Fatalf("no requests: %v %v, want no answers, as gubernator", res, err)
	}
	if h, err := client.HealthCheck(context.Background(), &gubernatorpb.HealthCheckReq{}); err != nil || h.Status != "healthy" {
		t.Fatalf("HealthCheck: %v %v", h, err)
	}
}

// gubernator's HTTP gateway: its JSON (fields by either name in, by proto
// name out, 64-bit integers as strings) and its error body.
func TestGubernatorHTTP(t *testing.T) {
	t.Parallel()
	httpporttest.Each(t, decisiontest.Default, Routes, func(t *testing.T, srv httpporttest.Served, key string) {
		body := `{"requests":[{"name":"requests_per_sec","uniqueKey":"account:12345","hits":"1","limit":"10","duration":"1000"},
			{"name":"requests_per_sec","unique_key":"account:12345","hits":1,"limit":10,"duration":1000,"algorithm":"TOKEN_BUCKET","metadata":{"a":"b"},"created_at":"1"}],"extra":true}`
		resp, m := httpporttest.Post(t, srv, LimitsPath, key, body)
		rs, _ := m["responses"].([]any)
		if resp.StatusCode != 200 || len(rs) != 2 {
			t.Fatalf("%d %v", resp.StatusCode, m)
		}
		remaining := map[any]bool{}
		for i, r := range rs { // the two take their hit at once, in no set order
			r := r.(map[string]any)
			remaining[r["remaining"]] = true
			if r["status"] != "UNDER_LIMIT" || r["limit"] != "10" || r["reset_time"] != "1795341616000" || r["error"] != "" {
				t.Errorf("answer %d: %v", i, r)
			}
		}
		if !remaining["9"] || !remaining["8"] {
			t.Errorf("remaining %v, want 9 and 8 (one counter)", remaining)
		}
		for _, tc := range []struct {
			key, body string
			status    int
			code      float64
		}{
			{"", body, 401, 16},
			{key, `{"requests":[{"name":"n"`, 400, 3},
			{key, `{"requests":[`, 400, 3},
		} {
			resp, m := httpporttest.Post(t, srv, LimitsPath, tc.key, tc.body)
			if resp.StatusCode != tc.status || m["code"] != tc.code || m["message"] == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d %v; want %d with code %v", tc.body, resp.StatusCode, m, tc.status, tc.code)
			}
		}
	})
	// GET /v1/HealthCheck: TestOpenAPI.
}

// serveGRPC serves svc's gubernator V1 on the decider's gRPC server, on a
// loopback port, and returns a connection to it.
func serveGRPC(t *testing.T, svc decision.Service) *grpc.ClientConn {
	srv := grpcserve.NewServer(svc)
	Register(srv, svc)
	return decisiontest.ServeGRPC(t, srv)
}
