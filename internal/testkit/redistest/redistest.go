// Package redistest gives tests real Redis: the shared server with a unique
// key prefix per test (cleaned with SCAN and UNLINK, never FLUSHDB), a
// throwaway server a test may stop and restart, and a throwaway 3-master
// Redis Cluster, both started from the redis-server binary on free loopback
// ports.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/containertest"
)

// DefaultAddr is the shared server tests use when SLUICE_TEST_REDIS_ADDR is unset.
const DefaultAddr = "127.0.0.1:6379"

var (
	addrOnce sync.Once
	addr     string
	addrErr  error
)

// Addr returns the shared server's address: SLUICE_TEST_REDIS_ADDR, else
// the local default, else a container when a Docker engine answers.
func Addr(t testing.TB) string {
	t.Helper()
	addrOnce.Do(func() {
		addr = os.Getenv("SLUICE_TEST_REDIS_ADDR")
		if addr == "" {
			addr = DefaultAddr
		}
		if addrErr = ping(addr); addrErr == nil {
			return
		}
		if a, _, err := containertest.Redis(context.Background()); err == nil {
			addr, addrErr = a, nil
		}
	})
	if addrErr != nil {
		t.Fatalf("redistest: Redis unreachable at %s (%v): start it, or set SLUICE_TEST_REDIS_ADDR", addr, addrErr)
	}
	return addr
}

func ping(a string) error {
	c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: 2 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// Prefix returns a key prefix unique to this test run of t, such as
// "test:TestFoo:1a2b3c4d:". The braces of hash tags are not used, so keys
// under one prefix may still spread over a cluster's slots.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("test:%.40s:%s:", unsafeChars.ReplaceAllString(t.Name(), "_"), hex.EncodeToString(b[:]))
}

// Client returns a client of the shared server and a prefix for this test's
// keys; every key under the prefix is deleted when the test ends.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	prefix := Prefix(t)
	t.Cleanup(func() {
		if err := DeleteKeys(context.Background(), c, prefix); err != nil {
			t.Errorf("redistest: cleaning %s*: %v", prefix, err)
		}
		c.Close()
	})
	return c, prefix
}

// DeleteKeys removes every key starting with prefix, on each master of a
// cluster, with SCAN and UNLINK.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, prefix string) error {
	pattern := escapeGlob(prefix) + "*"
	del := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		for len(keys) > 0 {
			batch := keys[:min(len(keys), 500)]
			keys = keys[len(batch):]
			for _, k := range batch { // one key per call: a cluster refuses cross-slot UNLINK
				if err := n.Unlink(ctx, k).Err(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, del)
	}
	if n, ok := c.(*redis.Client); ok {
		return del(ctx, n)
	}
	return fmt.Errorf("redistest: unsupported client %T", c)
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// Server is a redis-server process owned by one test.
type Server struct {
	Addr string
	port int
	dir  string
	args []string
	conf string // a configuration file, first on the command line (Sentinel's)
	cmd  *exec.Cmd
}

// StartServer starts a throwaway redis-server on a free port; it is killed
// when the test ends. The test may Stop and Start it.
func StartServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	port := freePort(t, false)
	s := &Server{port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), args: extraArgs}
	s.Start(t)
	t.Cleanup(func() { s.kill() })
	return s
}

// StartReplica starts a throwaway replica of master.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	return StartServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
}

// StartSentinel starts a throwaway Redis Sentinel watching master under
// name, alone in its quorum, quick to act: it calls the master down after
// 500 ms without an answer and promotes a replica.
func StartSentinel(t testing.TB, name string, master *Server) *Server {
	t.Helper()
	port := freePort(t, false)
	s := &Server{port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.conf = filepath.Join(s.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %[1]s 500\nsentinel failover-timeout %[1]s 2000\n", name, master.port)
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		t.Fatalf("redistest: sentinel config: %v", err)
	}
	s.Start(t)
	t.Cleanup(func() { s.kill() })
	return s
}

// Start starts the stopped server again on the same port and waits until it
// answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "redis.log",
	}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf, "--sentinel"}, args...)
	}
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: start redis-server (is it installed?): %v", err)
	}
	if err := waitFor(func() error { return ping(s.Addr) }); err != nil {
		s.kill()
		t.Fatalf("redistest: redis-server on %s never answered: %v", s.Addr, err)
	}
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, the hardest outage for a client. Resume undoes it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: pause: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: resume: %v", err)
	}
}

// Stop kills the server at once, as a crash or an outage would.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.kill()
}

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies only once continued
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Cluster is a throwaway Redis Cluster: its masters, then the replicas
// AddReplica adds and the masters AddMaster adds, in order.
type Cluster struct {
	Addrs   []string
	Servers []*Server
}

// StartCluster is StartClusterOf three masters.
func StartCluster(t testing.TB) *Cluster { return StartClusterOf(t, 3) }

// StartClusterOf starts n cluster-enabled redis-servers, splits the 16384
// slots evenly between them, joins them and waits until the cluster is ok.
// The servers are killed when the test ends.
func StartClusterOf(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		s := startClusterNode(t)
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	ctx := context.Background()
	err := c.eachNode(func(i int, node *redis.Client) error {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err == nil && i > 0 {
			err = node.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Servers[0].port)).Err()
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: cluster setup: %v", err)
	}
	if err := c.waitKnown(n); err != nil {
		t.Fatalf("redistest: cluster never became ok: %v", err)
	}
	return c
}

// waitKnown waits until every node says the cluster is ok and knows n
// nodes.
func (c *Cluster) waitKnown(n int) error {
	ctx := context.Background()
	return waitFor(func() error {
		return c.eachNode(func(i int, node *redis.Client) error {
			info, err := node.ClusterInfo(ctx).Result()
			if err == nil && (!strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r")) {
				err = fmt.Errorf("not ready: %.60s", info)
			}
			return err
		})
	})
}

// AddMaster starts a node and joins it to the cluster as a master of no
// slots: MoveSlots gives it some.
func (c *Cluster) AddMaster(t testing.TB) *Server {
	t.Helper()
	s := startClusterNode(t)
	n := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer n.Close()
	if err := n.ClusterMeet(context.Background(), "127.0.0.1", strconv.Itoa(c.Servers[0].port)).Err(); err != nil {
		t.Fatalf("redistest: new master meets the cluster: %v", err)
	}
	c.Servers = append(c.Servers, s)
	c.Addrs = append(c.Addrs, s.Addr)
	if err := c.waitKnown(len(c.Servers)); err != nil {
		t.Fatalf("redistest: new master never known: %v", err)
	}
	return s
}

// MoveSlots moves slots from one master to another as Redis's own
// resharding does, one slot at a time: the slot is marked migrating and
// importing, its keys are moved with MIGRATE (clients meanwhile follow ASK
// and TRYAGAIN), then every node is told its new owner. With between set,
// keys move one at a time and between is called after each key, and after
// each slot (slot true): a test paces the move with its decisions. It
// returns the keys moved. The cluster must have no replicas.
func (c *Cluster) MoveSlots(t testing.TB, from, to *Server, slots []int, between func(slot bool)) int {
	t.Helper()
	ctx := context.Background()
	var nodes []*redis.Client
	var src, dst *redis.Client
	for _, n := range c.Servers {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer cl.Close()
		nodes = append(nodes, cl)
		switch n {
		case from:
			src = cl
		case to:
			dst = cl
		}
	}
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	batch := 100
	if between != nil {
		batch = 1
	}
	moved := 0
	for _, slot := range slots {
		err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err()
		if err == nil {
			err = src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err()
		}
		for err == nil {
			var keys []string
			if keys, err = src.ClusterGetKeysInSlot(ctx, slot, batch).Result(); err != nil || len(keys) == 0 {
				break
			}
			args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			if err = src.Do(ctx, args...).Err(); err == nil {
				moved += len(keys)
				if between != nil {
					between(false)
				}
			}
		}
		for _, n := range nodes {
			if err == nil {
				err = n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
			}
		}
		if err != nil {
			t.Fatalf("redistest: moving slot %d: %v", slot, err)
		}
		if between != nil {
			between(true)
		}
	}
	return moved
}

// Slots are the slots lo to hi.
func Slots(lo, hi int) []int {
	out := make([]int, 0, hi-lo+1)
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

// startClusterNode starts a cluster-enabled redis-server, killed when the
// test ends. A node is declared failed after 2 s without an answer; a
// replica's first sync starts at once.
func startClusterNode(t testing.TB) *Server {
	t.Helper()
	port := freePort(t, true)
	s := &Server{port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(),
		args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--repl-diskless-sync-delay", "0"}}
	s.Start(t)
	t.Cleanup(func() { s.kill() })
	return s
}

// AddReplica starts a node, joins it to the cluster as a replica of the
// master c.Servers[master], and waits until it has synced with it. When
// that master dies (Stop), the replica takes its slots over once the
// others have declared it failed: a failover, in a few seconds.
func (c *Cluster) AddReplica(t testing.TB, master int) *Server {
	t.Helper()
	ctx := context.Background()
	s := startClusterNode(t)
	m := redis.NewClient(&redis.Options{Addr: c.Servers[master].Addr})
	defer m.Close()
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: master's id: %v", err)
	}
	n := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer n.Close()
	if err := n.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Servers[master].port)).Err(); err != nil {
		t.Fatalf("redistest: replica meets the cluster: %v", err)
	}
	err = waitFor(func() error { // refused until the node has heard of the master
		return n.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
	})
	if err == nil {
		// The master's word, not the replica's: a replica may say its link
		// is up before its first sync has run.
		err = waitFor(func() error {
			info, err := m.Info(ctx, "replication").Result()
			if err == nil && !strings.Contains(info, "127.0.0.1,port="+strconv.Itoa(s.port)+",state=online") {
				err = fmt.Errorf("replica not online: %.200s", info)
			}
			return err
		})
	}
	if err == nil {
		// Every master knows it as a replica: they vote when it asks to
		// take over.
		var myID string
		if myID, err = n.Do(ctx, "CLUSTER", "MYID").Text(); err == nil {
			err = waitFor(func() error {
				return c.eachNode(func(_ int, o *redis.Client) error {
					nodes, err := o.ClusterNodes(ctx).Result()
					if err == nil && (!strings.Contains(nodes, myID+" "+s.Addr) || !strings.Contains(nodes, "slave "+id)) {
						err = errors.New("it does not know the replica yet")
					}
					return err
				})
			})
		}
	}
	if err != nil {
		t.Fatalf("redistest: replica of %s: %v", c.Servers[master].Addr, err)
	}
	return s
}

// Set sets a configuration parameter on every node (CONFIG SET), such as
// cluster-require-full-coverage.
func (c *Cluster) Set(t testing.TB, param, value string) {
	t.Helper()
	err := c.eachNode(func(_ int, n *redis.Client) error { return n.ConfigSet(context.Background(), param, value).Err() })
	if err != nil {
		t.Fatalf("redistest: CONFIG SET %s: %v", param, err)
	}
}

// eachNode calls f with a client of each of the cluster's first nodes
// (Servers, in order) until one fails, and returns that node's error.
func (c *Cluster) eachNode(f func(i int, n *redis.Client) error) error {
	for i, s := range c.Servers {
		n := redis.NewClient(&redis.Options{Addr: s.Addr})
		err := f(i, n)
		n.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return nil
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// waitFor polls f until it succeeds or 15 seconds pass.
func waitFor(f func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort returns a loopback port nothing listens on at the moment.
func FreePort(t testing.TB) int { return freePort(t, false) }

// freePort returns a loopback port nothing listens on; with bus, port+10000
// (a cluster node's bus port) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			l2.Close()
			return port
		}
	}
	t.Fatal("redistest: no free port pair")
	return 0
}
