package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// slowBackend serves workers requests at a time, service each, the
// others waiting their turn; one that waits past patience is answered
// 503. Its capacity is workers in flight.
type slowBackend struct {
	workers  chan struct{}
	service  time.Duration
	patience time.Duration
	inFlight atomic.Int64 // in the handler: served or waiting
	// onEntry sees the requests in flight as each arrives.
	onEntry func(inFlight int64)
}

func (b *slowBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.onEntry(b.inFlight.Add(1))
	defer b.inFlight.Add(-1)
	t := time.NewTimer(b.patience)
	defer t.Stop()
	select {
	case b.workers <- struct{}{}:
	case <-t.C:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	time.Sleep(b.service)
	<-b.workers
	w.WriteHeader(http.StatusOK)
}

// An adaptive concurrency rule in front of a backend that takes 16
// requests at a time, with 1, 3 and 8 decider processes proxying to it on
// one Redis and clients three times its capacity, shed with 503s
// (-shed-status). The backend never sees
// more in flight than 1.05 times the fleet's limit in force, the limit
// (as the answers' X-RateLimit-Limit tell) settles near the backend's
// capacity, and a decider joining and another leaving change neither.
func TestAdaptiveLimitAcrossDeciderProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("up to nine decider processes")
	}
	cputest.Alone(t) // real time: a busy machine would slow the backend it measures
	store := pgstore.New(pgtest.Pool(t))
	key := tenantOn(t, store, "adaptive", policy.Rule{Name: "backend", Enabled: true, FailureMode: policy.FailLocal,
		Params: policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: 1000, Window: 250 * time.Millisecond, LeaseTTL: 10 * time.Second}})
	cp := controlPlane(t, store)
	exe := builtDecider(t)
	for _, n := range []int{1, 3, 8} {
		t.Run(strconv.Itoa(n)+"-deciders", func(t *testing.T) {
			adaptiveFleet(t, exe, cp, key, n)
		})
	}
}

func adaptiveFleet(t *testing.T, exe, cp, key string, n int) {
	// A service time well above what a busy machine adds to a request
	// (scheduling, the race detector), so that the latency the limit reads
	// is the backend's.
	const workers, service = 16, 100 * time.Millisecond
	var limits sync.Map // window (100 ms) → the highest limit an answer in it told
	window := func(at time.Time) int64 { return at.UnixMilli() / 100 }
	// What the backend saw in flight as each request arrived, checked
	// once the answers have told the limits: a lease taken under a limit
	// since lowered is held until its request ends, and an answer tells a
	// raised limit only once its request is served, so the limit in force
	// is the highest the answers told from a request's longest life (its
	// patience and its service) before to 300 ms after.
	type arrival struct {
		at       time.Time
		inFlight int64
	}
	var amu sync.Mutex
	var arrivals []arrival
	be := &slowBackend{workers: make(chan struct{}, workers), service: service, patience: 10 * service}
	be.onEntry = func(inFlight int64) {
		amu.Lock()
		arrivals = append(arrivals, arrival{time.Now(), inFlight})
		amu.Unlock()
	}
	backend := httptest.NewServer(be)
	t.Cleanup(backend.Close)
	srv := redistest.StartServer(t)
	args := []string{"-control-plane", cp, "-redis-url", "redis://" + srv.Addr, "-redis-prefix", redistest.Prefix(t),
		"-upstream", backend.URL, "-proxy-addr", "127.0.0.1:0", "-shed-status", "503"}
	env := []string{"SLUICE_DECIDER_KEY=dk", "SLUICE_PROXY_KEY=" + key}
	var mu sync.Mutex
	var fleet []deciderAddrs
	for range n {
		fleet = append(fleet, deciderProcessOf(t, exe, args, env...))
	}
	// Each limit an answer tells, by the window it came in: the
	// admissions' (200s) carry the fleet's limit as Redis answered it.
	note := func(resp *http.Response) {
		l, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Limit"), 10, 64)
		if err != nil {
			return
		}
		w := window(time.Now())
		for {
			v, loaded := limits.LoadOrStore(w, l)
			if !loaded || v.(int64) >= l || limits.CompareAndSwap(w, v, l) {
				return
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted, shed, failed atomic.Int64
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := range 3 * workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				d := fleet[i%len(fleet)]
				mu.Unlock()
				resp, err := client.Get(d.proxy + "/search")
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
					note(resp)
				case http.StatusServiceUnavailable:
					// Shed (-shed-status 503), with when to come back; the
					// backend's own 503s tell nothing of the kind.
					if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
						failed.Add(1)
						continue
					}
					shed.Add(1)
					time.Sleep(service / 4)
				default:
					if failed.Add(1) == 1 {
						t.Logf("%s answered %d", d.proxy, resp.StatusCode)
					}
				}
			}
		})
	}
	// settled returns the least and the most limit the answers told over
	// a second, after d.
	settled := func(d time.Duration) (lo, hi int64) {
		time.Sleep(d)
		from, to := window(time.Now()), window(time.Now().Add(time.Second))
		time.Sleep(time.Second + 100*time.Millisecond)
		lo = 1 << 62
		for w := from; w < to; w++ {
			if v, ok := limits.Load(w); ok {
				lo, hi = min(lo, v.(int64)), max(hi, v.(int64))
			}
		}
		return lo, hi
	}
	near := func(lo, hi int64) bool { return hi > 0 && lo >= workers*7/10 && hi <= workers*3/2 }
	lo, hi := settled(4 * time.Second)
	t.Logf("%d deciders: the limit the answers told over a second, settled: %d to %d (the backend takes %d)", n, lo, hi, workers)
	if !near(lo, hi) {
		t.Errorf("the limit went from %d to %d, want it near the backend's %d", lo, hi, workers)
	}
	// One decider of the fleet updates the limit, and each tells it.
	var updaters float64
	for _, d := range fleet {
		m := metrics(t, d.admin)
		updaters += sumOf(m, "sluice_adaptive_updater", `tenant="adaptive"`)
		if l := sumOf(m, "sluice_adaptive_limit", `tenant="adaptive"`, `rule="backend"`); l < float64(lo)-2 || l > float64(hi)+2 {
			t.Errorf("%s: sluice_adaptive_limit %v, the answers told %d to %d", d.admin, l, lo, hi)
		}
	}
	if updaters != 1 {
		t.Errorf("%v deciders say they update the limit, want 1", updaters)
	}
	// One decider joins; the first is sent no more requests.
	joined := deciderProcessOf(t, exe, args, env...)
	mu.Lock()
	fleet = append(fleet[1:], joined)
	mu.Unlock()
	lo, hi = settled(2 * 250 * time.Millisecond) // two windows
	t.Logf("two windows after one joined and one left, over a second: %d to %d", lo, hi)
	if !near(lo, hi) {
		t.Errorf("after one joined and one left, the limit went from %d to %d, want it near the backend's %d", lo, hi, workers)
	}
	close(stop)
	wg.Wait()
	var over int
	var worst float64
	for _, a := range arrivals {
		var hi int64
		w := window(a.at)
		for k := w - 12; k <= w+3; k++ {
			if v, ok := limits.Load(k); ok {
				hi = max(hi, v.(int64))
			}
		}
		if hi == 0 {
			continue
		}
		if a.inFlight*1000 > 1050*hi {
			over++
		}
		worst = max(worst, float64(a.inFlight)/float64(hi))
	}
	t.Logf("%d admitted, %d shed, %d failed; the backend saw %d requests, %d of them over 1.05× the limit; at worst %.3f× the limit",
		admitted.Load(), shed.Load(), failed.Load(), len(arrivals), over, worst)
	if failed.Load() > 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	if over > 0 {
		t.Errorf("the backend saw more than 1.05× the fleet's limit in flight %d times", over)
	}
}

// builtDecider builds the decider as users build it, without the race
// detector the tests may run under: eight deciders timed against a
// backend on two cores, each ten times slower, would measure the
// machine, not the limit.
func builtDecider(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "dataplane")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}
