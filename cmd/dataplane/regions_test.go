package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Two deciders, each of a region with its own counters (a Redis prefix of
// its own) and its own Kafka, one control plane: a global rule of 20 an
// hour per client, set through the store as the API sets it, admits 20
// across both regions once each hears of the other's admissions, and a
// decider reports its region's silence as a metric.
func TestGlobalRuleAcrossTwoDeciderProcesses(t *testing.T) {
	store := pgstore.New(pgtest.Pool(t))
	key := tenantOn(t, store, "acme", policy.Rule{Name: "global", KeyBy: []string{"client_id"}, Enabled: true, Scope: policy.ScopeGlobal,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 20, Window: time.Hour}})
	cp := controlPlane(t, store)
	east, west := kafkatest.Start(t, 1, []string{regions.DefaultTopic}), kafkatest.Start(t, 1, []string{regions.DefaultTopic})
	brokers := "east=" + east.Addrs()[0] + ";west=" + west.Addrs()[0]
	_, pe := redistest.Client(t)
	_, pw := redistest.Client(t)
	redisURL := "redis://" + redistest.Addr(t)
	e := deciderProcess(t, []string{"-control-plane", cp, "-redis-url", redisURL, "-redis-prefix", pe, "-region", "east", "-global-kafka", brokers}, "SLUICE_DECIDER_KEY=dk")
	w := deciderProcess(t, []string{"-control-plane", cp, "-redis-url", redisURL, "-redis-prefix", pw, "-region", "west", "-global-kafka", brokers}, "SLUICE_DECIDER_KEY=dk")

	client := &http.Client{Timeout: 5 * time.Second}
	admitted := 0
	for range 15 {
		ok, _, err := checkOnce(client, e.base, key, "c")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 15 {
		t.Fatalf("east admitted %d of 15 of a limit of 20", admitted)
	}
	// West learns of east's 15: its peek says 5 remain.
	deadline := time.Now().Add(10 * time.Second)
	for remaining(t, client, w.base, key, "c") != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("west never heard of east's admissions: %d remain", remaining(t, client, w.base, key, "c"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	admitted = 0
	for range 10 {
		if ok, _, err := checkOnce(client, w.base, key, "c"); err != nil {
			t.Fatal(err)
		} else if ok {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("west admitted %d, want the 5 the global limit has left", admitted)
	}
	// Both hear each other: no region silent, and each has published (a
	// decider publishes once an interval, so its metrics may lag the
	// checks by one).
	deadline = time.Now().Add(10 * time.Second)
	for _, d := range []deciderAddrs{e, w} {
		for {
			m := metrics(t, d.admin)
			silent, published := sumOf(m, "sluice_global_silent_regions"), sumOf(m, "sluice_global_published_bytes_total")
			if silent == 0 && published > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: silent %v, published %v bytes", d.base, silent, published)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// remaining is what a peek at client's global rule says remains.
func remaining(t *testing.T, client *http.Client, base, key, clientID string) int64 {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"`+clientID+`"},"peek":true}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Rules []struct {
			Remaining int64 `json:"remaining"`
		} `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Rules) != 1 {
		t.Fatalf("a peek: %v %+v", err, out)
	}
	return out.Rules[0].Remaining
}
