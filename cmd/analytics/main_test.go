package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/tlstest"
	"strconv"
)

// TestMain lets the tests run this binary's main in a child process (the
// test binary re-executed), so they can kill it with SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_ANALYTICS_CHILD") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a running analytics process.
type child struct {
	cmd  *exec.Cmd
	done chan error
	url  string // of its /healthz, /readyz and /metrics
}

func startChild(t *testing.T, env ...string) *child {
	t.Helper()
	return startChildLogging(t, io.Discard, env...)
}

// startChildLogging is startChild with the child's log written to logs.
func startChildLogging(t *testing.T, logs io.Writer, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), append(env, "SLUICE_ANALYTICS_CHILD=1")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan error, 1)}
	line, err := bufio.NewReader(out).ReadString('\n')
	_, url, found := strings.Cut(strings.TrimSpace(line), "metrics on ")
	if err != nil || !strings.Contains(line, "analytics consuming") || !found {
		_ = cmd.Process.Kill()
		t.Fatalf("analytics did not start: %q %v", line, err)
	}
	c.url = url
	go func() { _, _ = io.Copy(io.Discard, out); c.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- nil // for the cleanup
}

// stream produces chunks of events: in each chunk, one rejection per
// client of every tenant plus a counter delta per tenant; it calls between
// after each chunk.
type stream struct {
	tenants, clients, chunks int
	transport                kafka.RoundTripper // nil: plaintext
}

func (s stream) rejections() int64 { return int64(s.tenants * s.clients * s.chunks) }
func (s stream) total() int64      { return int64((s.tenants*s.clients + s.tenants) * s.chunks) }

func (s stream) produce(t *testing.T, brokers []string, topic string, between func(chunk int)) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchSize: 2000, Transport: s.transport,
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, MaxAttempts: 20,
		WriteBackoffMin: 50 * time.Millisecond, WriteBackoffMax: 500 * time.Millisecond}
	defer w.Close()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for chunk := range s.chunks {
		var msgs []kafka.Message
		for tn := range s.tenants {
			tenant := fmt.Sprint("tenant-", tn)
			for cl := range s.clients {
				v, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Rejection{Rejection: &sluicev1.Rejection{
					TenantId: tenant, Tier: "free", RuleId: "rule-1", ClientKey: fmt.Sprint("client-", cl), Cost: 1,
					At: timestamppb.New(at.Add(time.Duration(chunk) * time.Second))}}})
				msgs = append(msgs, kafka.Message{Key: []byte(tenant), Value: v})
			}
			v, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Delta{Delta: &sluicev1.CounterDelta{
				TenantId: tenant, Tier: "free", RuleId: "rule-1", Allowed: 3, Rejected: int64(s.clients),
				From: timestamppb.New(at), To: timestamppb.New(at.Add(time.Second))}}})
			msgs = append(msgs, kafka.Message{Key: []byte(tenant), Value: v})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := w.WriteMessages(ctx, msgs...)
		cancel()
		if err != nil {
			t.Fatalf("produce chunk %d: %v", chunk, err)
		}
		between(chunk)
	}
}

// check asserts the rollups hold every event of s exactly once.
func (s stream) check(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var events, allowed, rejected, top int64
	if err := pool.QueryRow(context.Background(), `SELECT sum(rejection_events), sum(allowed), sum(rejected),
		(SELECT sum(rejected) FROM analytics_top_clients) FROM analytics_minute`).Scan(&events, &allowed, &rejected, &top); err != nil {
		t.Fatal(err)
	}
	if events != s.rejections() || rejected != s.rejections() || top != s.rejections() || allowed != int64(3*s.tenants*s.chunks) {
		t.Errorf("rollups: %d rejection events, %d rejected, %d in top clients, %d allowed; want %d, %d, %d, %d",
			events, rejected, top, allowed, s.rejections(), s.rejections(), s.rejections(), 3*s.tenants*s.chunks)
	}
	// The hours' rollups, written with the minutes', hold the same.
	var hourEvents, hourAllowed, hourRejected int64
	if err := pool.QueryRow(context.Background(), `SELECT sum(rejection_events), sum(allowed), sum(rejected)
		FROM analytics_hour`).Scan(&hourEvents, &hourAllowed, &hourRejected); err != nil {
		t.Fatal(err)
	}
	if hourEvents != events || hourAllowed != allowed || hourRejected != rejected {
		t.Errorf("hours' rollups: %d rejection events, %d allowed, %d rejected; the minutes' %d, %d, %d",
			hourEvents, hourAllowed, hourRejected, events, allowed, rejected)
	}
}

func committed(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(next_offset), 0) FROM analytics_offsets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCommitted waits until atLeast offsets are committed. Its deadline
// is long: a test that kills a consumer waits for the group's session to
// time out and its partitions to move, and on a machine starved of CPU
// (-race, two cores shared with other suites) the survivors' own sessions
// can lapse too and the group rebalance again; a count that never comes
// is what fails.
func waitCommitted(t *testing.T, pool *pgxpool.Pool, atLeast int64) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for committed(t, pool) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %d of %d offsets committed", committed(t, pool), atLeast)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamSetup is a topic of partitions on a broker of its own (kfake,
// with opts), a schema, a pool on it, and the environment of an analytics
// process consuming that topic into that schema in batches of batch.
func streamSetup(t *testing.T, partitions int32, batch int, opts ...kfake.Opt) (env []string, broker *kafkatest.Broker, topic string, pool *pgxpool.Pool) {
	t.Helper()
	topic = kafkatest.Topic(t)
	broker = kafkatest.Start(t, partitions, []string{topic}, opts...)
	dsn := pgtest.Schema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	env = []string{"DATABASE_URL=" + dsn, "KAFKA_BROKERS=" + strings.Join(broker.Addrs(), ","),
		"SLUICE_EVENTS_TOPIC=" + topic, "SLUICE_ANALYTICS_BATCH=" + strconv.Itoa(batch)}
	return env, broker, topic, pool
}

// TestSIGKILLMidStreamLosesAndDoublesNothing kills the analytics process
// with SIGKILL while events stream in, restarts it, and checks every count.
func TestSIGKILLMidStreamLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	env, broker, topic, pool := streamSetup(t, 3, 300)
	s := stream{tenants: 6, clients: 50, chunks: 30}
	c := startChild(t, env...)
	var killedAt int64
	s.produce(t, broker.Addrs(), topic, func(chunk int) {
		if chunk == s.chunks/2 {
			waitCommitted(t, pool, 1) // it is mid-stream: some committed, more coming
			c.kill(t)
			killedAt = committed(t, pool)
			c = startChild(t, env...)
		}
	})
	if killedAt >= s.total() {
		t.Fatalf("killed after everything was committed (%d)", killedAt)
	}
	waitCommitted(t, pool, s.total())
	s.check(t, pool)
}

// TestTwelvePartitionsFourConsumersOneKilled is analytics scaled out in
// miniature, as docs/scaling.md plans it: a topic of 12 partitions read by
// four analytics processes of one group. One is killed with SIGKILL
// mid-stream and not restarted: once the group's session times out, the
// other three take its partitions over from the offsets it committed with
// its rollups, and every count is exact.
func TestTwelvePartitionsFourConsumersOneKilled(t *testing.T) {
	t.Parallel()
	cputest.Alone(t) // four processes under the race detector
	env, broker, topic, pool := streamSetup(t, 12, 100)
	s := stream{tenants: 48, clients: 10, chunks: 30} // tenants enough to reach every partition
	var children []*child
	for i := range 4 {
		logs := &logtest.Buffer{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("analytics process %d:\n%s", i, logs)
			}
		})
		children = append(children, startChildLogging(t, logs, env...))
	}
	var killedAt int64
	s.produce(t, broker.Addrs(), topic, func(chunk int) {
		if chunk == s.chunks/3 {
			waitCommitted(t, pool, 1)
			// Mid-stream, once all four consume: killed while its join
			// is pending, a member would stay in the generation.
			kafkatest.WaitStableGroup(t, broker.Addrs(), "sluice-analytics", 4)
			children[1].kill(t)
			killedAt = committed(t, pool)
		}
	})
	if killedAt >= s.total() {
		t.Fatalf("killed after everything was committed (%d)", killedAt)
	}
	waitCommitted(t, pool, s.total())
	s.check(t, pool)
	var partitions int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM analytics_offsets`).Scan(&partitions); err != nil {
		t.Fatal(err)
	}
	if partitions != 12 {
		t.Errorf("offsets of %d partitions committed, want 12", partitions)
	}
}

// TestBrokerRestartMidStreamLosesAndDoublesNothing restarts the broker
// (kfake keeping its data on disk) while the analytics process consumes.
func TestBrokerRestartMidStreamLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	env, broker, topic, pool := streamSetup(t, 3, 300, kfake.DataDir(t.TempDir()))
	startChild(t, env...)
	s := stream{tenants: 6, clients: 50, chunks: 20}
	s.produce(t, broker.Addrs(), topic, func(chunk int) {
		if chunk == s.chunks/2 {
			waitCommitted(t, pool, 1)
			broker.Restart(t)
		}
	})
	waitCommitted(t, pool, s.total())
	s.check(t, pool)
}

// ready polls the child's /readyz until it answers want (true: 200).
func (c *child) ready(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(c.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if (resp.StatusCode == http.StatusOK) == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never said ready=%v (last: %v %v)", want, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDatabaseOutageMidStreamLosesAndDoublesNothing stops the analytics
// database (a private server) while events stream in: the process stays
// up, not ready, and once the database is back every count is exact.
func TestDatabaseOutageMidStreamLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.Private(t)
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 3, []string{topic})
	pool, err := pgxpool.New(context.Background(), db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := startChild(t, "DATABASE_URL="+db.URL(), "KAFKA_BROKERS="+strings.Join(broker.Addrs(), ","),
		"SLUICE_EVENTS_TOPIC="+topic, "SLUICE_ANALYTICS_BATCH=300")
	s := stream{tenants: 6, clients: 50, chunks: 20}
	var stoppedAt int64
	s.produce(t, broker.Addrs(), topic, func(chunk int) {
		switch chunk {
		case s.chunks / 2:
			waitCommitted(t, pool, 1)
			if err := db.Stop(); err != nil {
				t.Fatal(err)
			}
			c.ready(t, false)
		case s.chunks/2 + 3: // three chunks produced while the database is down
			c.alive(t)
			if _, err := db.Start(); err != nil {
				t.Fatal(err)
			}
			pool.Reset() // the test's own connections died with the server
			stoppedAt = committed(t, pool)
		}
	})
	if stoppedAt >= s.total() {
		t.Fatalf("everything was committed before the outage ended (%d)", stoppedAt)
	}
	waitCommitted(t, pool, s.total())
	s.check(t, pool)
	c.ready(t, true)
	c.alive(t) // the same process all along
}

// alive fails the test if the child has exited.
func (c *child) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		t.Fatalf("analytics exited: %v", err)
	default:
	}
}

// TestKafkaOverTLSWithSASL consumes from a broker that asks for TLS and
// SCRAM-SHA-512, configured by the environment, and serves its metrics
// over HTTPS; the password is in no log line.
func TestKafkaOverTLSWithSASL(t *testing.T) {
	t.Parallel()
	const password = "sc4am-pa55word"
	topic := kafkatest.Topic(t)
	broker, caFile := kafkatest.StartSecure(t, 2, []string{topic}, "SCRAM-SHA-512", "analytics", password)
	ca := tlstest.NewCA(t) // of the metrics port
	dir := t.TempDir()
	cert, key, _ := ca.ServerFiles(t, dir, 1)
	dsn := pgtest.Schema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logs, err := os.Create(filepath.Join(dir, "analytics.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	c := startChildLogging(t, logs, "DATABASE_URL="+dsn, "KAFKA_BROKERS="+strings.Join(broker.Addrs(), ","),
		"SLUICE_EVENTS_TOPIC="+topic, "KAFKA_TLS_CA="+caFile, "KAFKA_SASL_MECHANISM=scram-sha-512",
		"KAFKA_SASL_USERNAME=analytics", "KAFKA_SASL_PASSWORD="+password,
		"SLUICE_ANALYTICS_TLS_CERT="+cert, "SLUICE_ANALYTICS_TLS_KEY="+key)
	if !strings.HasPrefix(c.url, "https://") {
		t.Fatalf("metrics on %s, want https://", c.url)
	}
	tr, err := (&kafkasec.Config{CAFile: caFile, SASL: "scram-sha-512", Username: "analytics", Password: password}).Transport()
	if err != nil {
		t.Fatal(err)
	}
	s := stream{tenants: 2, clients: 10, chunks: 3, transport: tr}
	s.produce(t, broker.Addrs(), topic, func(int) {})
	waitCommitted(t, pool, s.total())
	s.check(t, pool)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := client.Get(c.url + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz over HTTPS: %v %v", resp, err)
	}
	resp.Body.Close()
	if b, err := os.ReadFile(logs.Name()); err != nil || strings.Contains(string(b), password) {
		t.Fatalf("the log shows the SASL password (or cannot be read: %v)", err)
	}
}

// A variable that does not parse stops analytics at start, named.
func TestMalformedSettingStopsAnalytics(t *testing.T) {
	env := map[string]string{"SLUICE_RETENTION": "30d", "DATABASE_URL": "postgres://127.0.0.1:1/none"}
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `SLUICE_RETENTION="30d": want a duration`) {
		t.Fatalf("run: %v, want SLUICE_RETENTION named", err)
	}
}

// A setting that parses but cannot work stops analytics at start, before
// it reaches the database or Kafka, the flag named.
func TestImpossibleSettingStopsAnalytics(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-batch-size", "0"}, "-batch-size"},
		{[]string{"-top-clients", "-1"}, "-top-clients"},
		{[]string{"-hour-retention", "-1h"}, "-hour-retention"},
		{[]string{"-kafka-brokers", " "}, "-kafka-brokers"},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}
		err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, tc.args...), func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want+" ") {
			t.Errorf("%v: %v, want %s named", tc.args, err, tc.want)
		}
	}
}
