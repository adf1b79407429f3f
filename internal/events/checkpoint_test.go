package events

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/events/eventstest"
	"github.com/sluicehq/sluice/internal/spool"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// childEnv, set in this test binary's environment, makes it a decider's
// publisher that counts and waits to be killed (see countingChild).
const childEnv = "SLUICE_EVENTS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(countingChild())
	}
	os.Exit(m.Run())
}

// countingChild runs a publisher on the spool in SLUICE_EVENTS_SPOOL for
// the brokers and topic of SLUICE_EVENTS_BROKERS and _TOPIC, counts 7
// allowed decisions, says so, and runs until killed: its delta interval
// (an hour) never comes.
func countingChild() int {
	sp, err := spool.Open(os.Getenv("SLUICE_EVENTS_SPOOL"), 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p := NewPublisher(Config{Brokers: strings.Split(os.Getenv("SLUICE_EVENTS_BROKERS"), ","), Topic: os.Getenv("SLUICE_EVENTS_TOPIC"),
		Decider: "child", DeltaInterval: time.Hour, CheckpointInterval: 10 * time.Millisecond, Spool: sp})
	go func() { _ = p.Run(context.Background()) }()
	for range 7 {
		p.Count("t1", "free", "r1", true, false)
	}
	fmt.Println("counted")
	select {}
}

// A decider killed outright (SIGKILL: no shutdown, no last delta) loses
// none of the counts it had checkpointed: the next run on its spool sends
// them. Without the checkpoint they would wait for a delta interval that
// never comes.
func TestCountsOfADeciderKilledOutrightAreSentByTheNextRun(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), childEnv+"=1", "SLUICE_EVENTS_SPOOL="+dir,
		"SLUICE_EVENTS_BROKERS="+strings.Join(b.Addrs(), ","), "SLUICE_EVENTS_TOPIC="+topic)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "counted\n" {
		t.Fatalf("the child: %q, %v", line, err)
	}
	waitFor(t, "the counts checkpointed", func() bool {
		c, err := readCheckpoint(dir)
		return err == nil && len(c.Counts) == 1 && c.Counts[0].Allowed == 7
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	sp, err := spool.Open(dir, 0) // the dead child's lock is gone with it
	if err != nil {
		t.Fatal(err)
	}
	start(t, Config{Brokers: b.Addrs(), Topic: topic, DeltaInterval: time.Hour, FlushInterval: 10 * time.Millisecond, Spool: sp})
	ta := eventstest.Read(t, b.Addrs(), topic, func(ta *eventstest.Tally) bool { return ta.Allowed >= 7 })
	if ta.Allowed != 7 {
		t.Fatalf("%d allowed delivered, want the 7 the killed run counted", ta.Allowed)
	}
}

// What an earlier run checkpointed goes out first in the next: deltas it
// had taken go as they were stamped, so that one it had delivered too is
// counted once, and its counts not yet in a delta as deltas of the new run.
func TestCheckpointedDeltasAreSentAgainAsStamped(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	dir := t.TempDir()
	sp := eventstest.Spool(t, dir)
	cfg := Config{Brokers: b.Addrs(), Topic: topic, DeltaInterval: time.Hour, FlushInterval: 10 * time.Millisecond, Spool: sp}
	earlier := NewPublisher(cfg)
	for range 5 {
		earlier.Count("t1", "free", "r1", true, false)
	}
	taken := earlier.deltas()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(context.Background(), taken...); err != nil { // delivered, then the run died
		t.Fatal(err)
	}
	for range 3 {
		earlier.Count("t1", "free", "r1", false, false)
	}
	earlier.checkpoint(taken)
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.Spool = eventstest.Spool(t, dir)
	start(t, cfg)
	ta := eventstest.Read(t, b.Addrs(), topic, func(ta *eventstest.Tally) bool { return ta.Messages >= 3 })
	if ta.Allowed != 5 || ta.Rejected != 3 || ta.Duplicates != 1 {
		t.Fatalf("delivered %d allowed, %d rejected, %d duplicates; want 5 (once), 3 and the delivered delta sent again once",
			ta.Allowed, ta.Rejected, ta.Duplicates)
	}
}

func readCheckpoint(dir string) (checkpoint, error) {
	var c checkpoint
	b, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	return c, err
}

// FuzzRecoverCheckpoint feeds arbitrary bytes to the checkpoint's reader,
// as a damaged file would: it never panics, and what it recovers is
// deltas keyed by their tenant, to be sent.
func FuzzRecoverCheckpoint(f *testing.F) {
	f.Add([]byte(`{"at":"2026-11-24T12:00:01Z","since":"2026-11-24T12:00:00Z","counts":[{"Tenant":"t1","Tier":"free","Rule":"r1","Allowed":3,"Rejected":1,"Shadow":0}],"dropped":{"t1":2}}`))
	f.Add([]byte(`{"pending":[{"Key":"dDE=","Value":"CgA="}]}`))
	f.Add([]byte(`{"at":"2026-11-24T12:00:00Z","since":"2026-11-24T12:00:05Z"}`))
	f.Add([]byte(`{`))
	dir := f.TempDir()
	sp, err := spool.Open(dir, 0)
	if err != nil {
		f.Fatal(err)
	}
	p := NewPublisher(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Spool: sp, Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, checkpointFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, m := range p.recoverCheckpoint() {
			if m.Headers == nil {
				t.Fatalf("recovered a message that is no delta: %+v", m)
			}
		}
	})
}
