package sluiceclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/sluicehq/sluice/sluiceclient"
)

// Rate limit every request of an HTTP service by its client's id, taken
// from a header: rejected requests get 429 with Retry-After and a
// problem+json body, every answer the rate limit headers.
func Example() {
	c := sluiceclient.New(sluiceclient.Config{
		URL: "http://127.0.0.1:8080",
		Key: os.Getenv("SLUICE_CHECK_KEY"),
	})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	http.Handle("/", c.Middleware(sluiceclient.ByHeader("X-Client-Id"), app))
	log.Fatal(http.ListenAndServe(":8000", nil))
}

// Behind a load balancer (here in 10.0.0.0/8), limit each client by its
// address: the balancer's X-Forwarded-For is believed, nobody else's.
func ExampleByClientIP() {
	c := sluiceclient.New(sluiceclient.Config{URL: "http://127.0.0.1:8080", Key: os.Getenv("SLUICE_CHECK_KEY")})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	http.Handle("/", c.Middleware(sluiceclient.ByClientIP(netip.MustParsePrefix("10.0.0.0/8")), app))
	log.Fatal(http.ListenAndServe(":8000", nil))
}

// Check a request by hand: a search that costs 5, for a client on the pro
// tier.
func ExampleClient_Check() {
	c := sluiceclient.New(sluiceclient.Config{
		URL:         "http://127.0.0.1:8080",
		Key:         os.Getenv("SLUICE_CHECK_KEY"),
		Timeout:     100 * time.Millisecond,
		FailureMode: sluiceclient.FailOpen, // the decider unreachable: let requests through
	})
	d, err := c.Check(context.Background(), sluiceclient.Request{
		Tier:        "pro",
		Descriptors: map[string]string{"client_id": "alice", "route": "/search"},
		Cost:        5,
	})
	switch {
	case errors.Is(err, sluiceclient.ErrRefused):
		log.Fatalf("the decider refused the check itself (a bad key, invalid descriptors): %v", err)
	case d.Failed:
		log.Printf("no decider (%v): the failure mode answered allowed=%v", err, d.Allowed)
	case !d.Allowed:
		r := d.Rules[d.Deciding]
		fmt.Printf("rejected by %s: %s; try again in %v\n", r.Name, r.Message, d.RetryAfter())
	default:
		fmt.Println("allowed")
	}
}

// Hold a place under a concurrency rule for the length of a job, and give
// it back when the job ends rather than at the rule's lease TTL.
func ExampleClient_Release() {
	c := sluiceclient.New(sluiceclient.Config{URL: "http://127.0.0.1:8080", Key: os.Getenv("SLUICE_CHECK_KEY")})
	ctx := context.Background()
	job := sluiceclient.Request{Descriptors: map[string]string{"client_id": "alice", "route": "/export"}, Lease: "export-7f3a"}
	d, err := c.Check(ctx, job)
	if err != nil || !d.Allowed {
		fmt.Println("too many exports running: try later")
		return
	}
	defer func() {
		if err := c.Release(ctx, job); err != nil {
			log.Printf("release: %v (the lease ends at its TTL)", err)
		}
	}()
	// … run the export …
}

// Gather the checks that many goroutines make at once into CheckBatch
// calls: far less work per decision for the decider, for at most one
// call's round trip of waiting.
func ExampleConfig_coalesce() {
	c := sluiceclient.New(sluiceclient.Config{
		URL:      "http://127.0.0.1:8080",
		Key:      os.Getenv("SLUICE_CHECK_KEY"),
		Coalesce: true,
	})
	defer c.Close()
	d, err := c.Check(context.Background(), sluiceclient.Request{Descriptors: map[string]string{"client_id": "alice"}})
	fmt.Println(d.Allowed, err)
}
