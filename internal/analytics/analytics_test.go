package analytics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func rejection(tenant, rule, client string, at time.Time, shadow bool) []byte {
	b, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Rejection{Rejection: &sluicev1.Rejection{
		TenantId: tenant, Tier: "free", RuleId: rule, ClientKey: client, Cost: 1, At: timestamppb.New(at), Shadow: shadow}}})
	return b
}

func delta(tenant, rule string, to time.Time, allowed, rejected, shadow, dropped int64) []byte {
	b, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Delta{Delta: &sluicev1.CounterDelta{
		TenantId: tenant, Tier: "free", RuleId: rule, Allowed: allowed, Rejected: rejected, ShadowRejected: shadow,
		DroppedRejections: dropped, From: timestamppb.New(to.Add(-10 * time.Second)), To: timestamppb.New(to)}}})
	return b
}

// stamped returns the event v as the producer's seq-th.
func stamped(v []byte, producer string, seq uint64) []byte {
	var ev sluicev1.Event
	if err := proto.Unmarshal(v, &ev); err != nil {
		panic(err)
	}
	ev.Producer, ev.Seq = producer, seq
	b, _ := proto.Marshal(&ev)
	return b
}

// minuteRow reads one minute's rollup row (zeros when absent).
func minuteRow(t *testing.T, pool *pgxpool.Pool, tenant, rule string, minute time.Time) minuteCounts {
	t.Helper()
	return rollupRow(t, pool, "analytics_minute", "minute", tenant, rule, minute)
}

// hourRow reads one hour's rollup row (zeros when absent).
func hourRow(t *testing.T, pool *pgxpool.Pool, tenant, rule string, hour time.Time) minuteCounts {
	t.Helper()
	return rollupRow(t, pool, "analytics_hour", "hour", tenant, rule, hour)
}

func rollupRow(t *testing.T, pool *pgxpool.Pool, table, column, tenant, rule string, at time.Time) (c minuteCounts) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(allowed),0), coalesce(sum(rejected),0),
		coalesce(sum(shadow_rejected),0), coalesce(sum(rejection_events),0), coalesce(sum(shadow_events),0),
		coalesce(sum(dropped_rejections),0)
		FROM `+table+` WHERE tenant_id = $1 AND rule_id = $2 AND `+column+` = $3`, tenant, rule, at).
		Scan(&c.allowed, &c.rejected, &c.shadow, &c.rejectionEvents, &c.shadowEvents, &c.dropped)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkHours fails t unless every hour's rollup row holds the sums of its
// minutes' rows, and there is no other.
func checkHours(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var wrong, hours int64
	err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE
			(m.a, m.r, m.s, m.re, m.se, m.d) IS DISTINCT FROM (h.a, h.r, h.s, h.re, h.se, h.d)), count(*)
		FROM (SELECT tenant_id, date_bin('1 hour', minute, 'epoch') AS hour, tier, rule_id, region, sum(allowed) a,
				sum(rejected) r, sum(shadow_rejected) s, sum(rejection_events) re, sum(shadow_events) se,
				sum(dropped_rejections) d
			FROM analytics_minute GROUP BY 1, 2, 3, 4, 5) m
		FULL JOIN (SELECT tenant_id, hour, tier, rule_id, region, allowed a, rejected r, shadow_rejected s,
				rejection_events re, shadow_events se, dropped_rejections d FROM analytics_hour) h
			USING (tenant_id, hour, tier, rule_id, region)`).Scan(&wrong, &hours)
	if err != nil {
		t.Fatal(err)
	}
	if wrong != 0 || hours == 0 {
		t.Fatalf("%d of %d hours' rollups are not the sums of their minutes'", wrong, hours)
	}
}

// checkDays fails t unless the top clients' day rows are the sums of
// their hours' rows for the days summed, and there are none of the
// others, where the days' hours are all kept (from hours_from on).
func checkDays(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var wrong, days int64
	err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE (h.r, h.e) IS DISTINCT FROM (d.r, d.e)), count(*)
		FROM (SELECT tenant_id, rule_id, date_bin('1 day', hour, 'epoch') AS day, client_key, sum(rejected) r, sum(error) e
			FROM analytics_top_clients WHERE hour < (SELECT until FROM analytics_top_clients_days) GROUP BY 1, 2, 3, 4) h
		FULL JOIN (SELECT tenant_id, rule_id, day, client_key, rejected r, error e FROM analytics_top_clients_day) d
			USING (tenant_id, rule_id, day, client_key)
		WHERE day >= (SELECT hours_from FROM analytics_top_clients_days)`).Scan(&wrong, &days)
	if err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Fatalf("%d of %d top clients' days are not the sums of their hours'", wrong, days)
	}
}

func topClients(t *testing.T, pool *pgxpool.Pool, tenant, rule string) map[string]int64 {
	t.Helper()
	return sums[string](t, pool, `SELECT client_key, sum(rejected) FROM analytics_top_clients
		WHERE tenant_id = $1 AND rule_id = $2 GROUP BY client_key`, tenant, rule)
}

// topDays returns the rejections of the top clients' days, by day.
func topDays(t *testing.T, pool *pgxpool.Pool) map[time.Time]int64 {
	t.Helper()
	return sums[time.Time](t, pool, `SELECT day AT TIME ZONE 'UTC', sum(rejected) FROM analytics_top_clients_day GROUP BY day`)
}

// sums returns the rows of query, of a key and a sum, as a map.
func sums[K comparable](t *testing.T, pool *pgxpool.Pool, query string, args ...any) map[K]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[K]int64{}
	var k K
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func poolFor(t testing.TB) *pgxpool.Pool { return pgtest.Pool(t) }

func kafkatestTopic(t testing.TB) string { return kafkatest.Topic(t) }

func TestBatchRefusesMalformedEvents(t *testing.T) {
	t.Parallel()
	ok := rejection("t", "r", "c", t0, false)
	for name, v := range map[string][]byte{
		"garbage":         []byte("\xff\xff\xff"),
		"empty":           nil,
		"no tenant":       rejection("", "r", "c", t0, false),
		"no rule":         rejection("t", "", "c", t0, false),
		"no time":         rejection("t", "r", "c", time.Unix(0, 0), false),
		"far future":      rejection("t", "r", "c", time.Date(3001, 1, 1, 0, 0, 0, 0, time.UTC), false),
		"negative":        delta("t", "r", t0, -1, 0, 0, 0),
		"huge":            make([]byte, MaxEventBytes+1),
		"no seq":          stamped(rejection("t", "r", "c", t0, false), "p", 0),
		"no producer":     stamped(rejection("t", "r", "c", t0, false), "", 7),
		"seq > int64":     stamped(rejection("t", "r", "c", t0, false), "p", 1<<63),
		"long producer":   stamped(rejection("t", "r", "c", t0, false), string(make([]byte, 300)), 1),
		"NUL in tenant":   rejection("t\x00", "r", "c", t0, false),
		"NUL in rule":     delta("t", "r\x00", t0, 1, 0, 0, 0),
		"NUL in producer": stamped(rejection("t", "r", "c", t0, false), "p\x00", 1),
	} {
		b := NewBatch()
		if err := b.Add(v); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Add = %v, want ErrMalformed", name, err)
		}
		if b.Invalid != 1 || b.Events != 0 || len(b.minutes) != 0 {
			t.Errorf("%s: batch %+v changed", name, b)
		}
	}
	b := NewBatch()
	if err := b.Add(ok); err != nil || b.Events != 1 {
		t.Fatalf("a valid event: %v (batch %+v)", err, b)
	}
}

// FuzzBatchAdd feeds arbitrary bytes to the decoder: it never panics, and
// an accepted event lands in exactly one minute row.
func FuzzBatchAdd(f *testing.F) {
	f.Add(rejection("t", "r", "c", t0, false))
	f.Add(rejection("t", "r", "c", t0, true))
	f.Add(delta("t", "r", t0, 3, 2, 1, 0))
	f.Add(stamped(rejection("t", "r", "c", t0, false), "decider-run", 7))
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, v []byte) {
		b := NewBatch()
		if err := b.Add(v); err != nil {
			if !errors.Is(err, ErrMalformed) || len(b.minutes) != 0 {
				t.Fatalf("refused with %v, batch %+v", err, b)
			}
			return
		}
		if len(b.minutes) != 1 {
			t.Fatalf("accepted event in %d minute rows", len(b.minutes))
		}
		for k := range b.minutes {
			if k.minute%60 != 0 || k.tenant == "" {
				t.Fatalf("bad key %+v", k)
			}
		}
	})
}

// A batch counts each producer's events once: what comes again at or below
// the highest seq it has seen of that producer (a resend) is skipped,
// whether seen in this batch or committed before it; events without a
// producer (older deciders') count as they come.
func TestBatchCountsAResentEventOnce(t *testing.T) {
	t.Parallel()
	ev := func(seq uint64) []byte { return stamped(delta("t", "r", t0, 1, 0, 0, 0), "p1", seq) }
	b := NewBatchAfter(Marks{"p1": 2, "p0": 9})
	for _, v := range [][]byte{
		ev(1), ev(2), // committed before
		ev(3), ev(4), ev(3), ev(4), ev(5), // a resend of 3 and 4, then 5
		stamped(delta("t", "r", t0, 10, 0, 0, 0), "p2", 1), // another producer's 1
		stamped(delta("t", "r", t0, 10, 0, 0, 0), "p2", 1),
		delta("t", "r", t0, 100, 0, 0, 0), delta("t", "r", t0, 100, 0, 0, 0), // no producer: both count
	} {
		if err := b.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.minutes[minuteKey{tenant: "t", tier: "free", rule: "r", minute: t0.Add(-time.Minute).Unix()}].allowed; got != 3+10+200 {
		t.Errorf("allowed %d, want 213 (3 of p1, 10 of p2, 200 without a producer)", got)
	}
	if b.Events != 6 || b.Duplicates != 5 {
		t.Errorf("events %d, duplicates %d; want 6 and 5", b.Events, b.Duplicates)
	}
	if got, want := b.Marks(), (Marks{"p0": 9, "p1": 5, "p2": 1}); !maps.Equal(got, want) {
		t.Errorf("marks after the batch %v, want %v", got, want)
	}
}

func TestCommitAddsAndFences(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 10)
	ctx := context.Background()
	b := NewBatch()
	for _, v := range [][]byte{
		rejection("t1", "r1", "alice", t0.Add(5*time.Second), false),
		rejection("t1", "r1", "alice", t0.Add(65*time.Second), false),
		rejection("t1", "r1", "bob", t0.Add(6*time.Second), true),
		delta("t1", "r1", t0.Add(30*time.Second), 10, 2, 1, 0),
		delta("t1", "", t0.Add(60*time.Second), 0, 0, 0, 4), // ends at the minute: counts in the one before
	} {
		if err := b.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if off, err := s.Offset(ctx, "g", "topic", 0); err != nil || off != -1 {
		t.Fatalf("Offset before any commit = %d, %v; want -1", off, err)
	}
	if err := s.Commit(ctx, "g", "topic", 0, -1, 5, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "g", "topic", 0, 5, 10, b); err != nil { // the same batch again: counts double
		t.Fatal(err)
	}
	// A consumer that read from offset 5 too is fenced, and writes nothing.
	if err := s.Commit(ctx, "g", "topic", 0, 5, 10, b); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale commit = %v, want ErrFenced", err)
	}
	if err := s.Commit(ctx, "g", "topic", 0, -1, 10, b); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale first commit = %v, want ErrFenced", err)
	}
	if off, _ := s.Offset(ctx, "g", "topic", 0); off != 10 {
		t.Fatalf("offset %d, want 10", off)
	}
	if got, want := minuteRow(t, pool, "t1", "r1", t0), (minuteCounts{allowed: 20, rejected: 4, shadow: 2, rejectionEvents: 2, shadowEvents: 2}); got != want {
		t.Errorf("minute 0: %+v, want %+v", got, want)
	}
	if got := minuteRow(t, pool, "t1", "r1", t0.Add(time.Minute)); got.rejectionEvents != 2 {
		t.Errorf("minute 1: %+v, want 2 rejection events", got)
	}
	if got := minuteRow(t, pool, "t1", "", t0); got.dropped != 8 {
		t.Errorf("dropped %+v, want 8", got)
	}
	if got := topClients(t, pool, "t1", "r1"); len(got) != 1 || got["alice"] != 4 {
		t.Errorf("top clients %v, want alice: 4 (shadow rejections are not counted)", got)
	}
	if got, want := hourRow(t, pool, "t1", "r1", t0), (minuteCounts{allowed: 20, rejected: 4, shadow: 2, rejectionEvents: 4, shadowEvents: 2}); got != want {
		t.Errorf("hour 0: %+v, want %+v (its two minutes, twice)", got, want)
	}
	checkHours(t, pool)
}

// Events from deciders of several regions roll up into rows of their own
// region, minutes and hours alike; summed, they are every region's counts.
func TestRollupsPerRegion(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 10)
	ctx := context.Background()
	inRegion := func(v []byte, region string) []byte {
		var ev sluicev1.Event
		if err := proto.Unmarshal(v, &ev); err != nil {
			t.Fatal(err)
		}
		switch k := ev.Kind.(type) {
		case *sluicev1.Event_Delta:
			k.Delta.Region = region
		case *sluicev1.Event_Rejection:
			k.Rejection.Region = region
		}
		b, _ := proto.Marshal(&ev)
		return b
	}
	b := NewBatch()
	for _, v := range [][]byte{
		inRegion(delta("t1", "r1", t0.Add(30*time.Second), 10, 1, 0, 0), "east"),
		inRegion(delta("t1", "r1", t0.Add(40*time.Second), 20, 2, 0, 0), "west"),
		inRegion(rejection("t1", "r1", "alice", t0.Add(5*time.Second), false), "west"),
		delta("t1", "r1", t0.Add(50*time.Second), 100, 0, 0, 0), // a decider of no region
	} {
		if err := b.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(ctx, "g", "topic", 0, -1, 4, b); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"analytics_minute", "analytics_hour"} {
		rows, err := pool.Query(ctx, `SELECT region, allowed, rejected, rejection_events FROM `+table+` WHERE tenant_id = 't1' ORDER BY region`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var region string
			var a, r, re int64
			if err := rows.Scan(&region, &a, &r, &re); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%q:%d/%d/%d", region, a, r, re))
		}
		if want := []string{`"":100/0/0`, `"east":10/1/0`, `"west":20/2/1`}; !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", table, got, want)
		}
	}
	if got := minuteRow(t, pool, "t1", "r1", t0); got.allowed != 130 || got.rejected != 3 {
		t.Errorf("summed over regions: %+v, want 130 allowed, 3 rejected", got)
	}
	checkHours(t, pool)
}

// Rejections claiming the largest costs (a check's cost is the caller's to
// choose) count at most the largest limit each, and a client's count stays
// at MaxClientCount: batch after batch commits, where an overflow had
// failed every commit of the partition from then on, for every tenant on
// it. Clients replaced in a full group keep an error under their count.
func TestHugeCostsCountBoundedAndNeverStopTheConsumer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 2) // two counters a group: replacements too
	ctx := context.Background()
	huge := func(client string) []byte {
		b, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Rejection{Rejection: &sluicev1.Rejection{
			TenantId: "t1", Tier: "free", RuleId: "r1", ClientKey: client, Cost: math.MaxInt64, At: timestamppb.New(t0.Add(time.Second))}}})
		return b
	}
	var offset int64 = -1
	for i := range 4 {
		b := NewBatch()
		for _, v := range [][]byte{huge("z"), huge("z"), huge("y"), huge("x"), rejection("t1", "r1", "w", t0, false)} {
			if err := b.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Commit(ctx, "g", "topic", 0, offset, offset+6, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		offset += 6
		if i == 0 { // z's two events count twice the largest limit, which w (replacing z) inherits
			if got := topClients(t, pool, "t1", "r1"); got["w"] != 2*policy.MaxLimit+1 || got["y"] != 2*policy.MaxLimit {
				t.Fatalf("after one batch: %v, want w at twice the largest limit and one, y at twice it", got)
			}
		}
	}
	var n, bad int
	var most int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE error >= rejected OR rejected > $1), max(rejected)
		FROM analytics_top_clients`, int64(MaxClientCount)).Scan(&n, &bad, &most); err != nil {
		t.Fatal(err)
	}
	// Four batches of 4 largest limits and one: at most 16 of them and 4.
	if n != 2 || bad != 0 || most > 16*policy.MaxLimit+4 {
		t.Fatalf("%d counters, %d out of bounds, the largest %d; want 2, 0, at most %d", n, bad, most, 16*policy.MaxLimit+4)
	}
	// Held at the bound, not wrapped.
	if got := addCount(MaxClientCount-1, policy.MaxLimit); got != MaxClientCount {
		t.Fatalf("addCount at the bound = %d", got)
	}
	merged := mergeTop([]counter{{client: "a", rejected: MaxClientCount}}, map[string]int64{"b": MaxClientCount}, 1)
	if merged[0].rejected != MaxClientCount || merged[0].error >= merged[0].rejected {
		t.Fatalf("a replacement at the bound: %+v", merged[0])
	}
}

// A client id holding NUL, which PostgreSQL's text cannot, is counted as
// U+FFFD in its place: the commit goes through, and so do the next ones.
func TestClientKeysWithNULCommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 10)
	b := NewBatch()
	for range 2 {
		if err := b.Add(rejection("t1", "r1", "a\x00b", t0, false)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(context.Background(), "g", "topic", 0, -1, 2, b); err != nil {
		t.Fatal(err)
	}
	if got := topClients(t, pool, "t1", "r1"); got["a\uFFFDb"] != 2 || len(got) != 1 {
		t.Fatalf("top clients %v", got)
	}
	// A client key longer than a row takes (a rule keyed by many long
	// descriptors) is cut and counted, not dropped.
	long := strings.Repeat("client_id=x, ", 200)
	b = NewBatch()
	if err := b.Add(rejection("t1", "r2", long, t0, false)); err != nil || b.Events != 1 {
		t.Fatalf("a long client key: %v", err)
	}
	if err := s.Commit(context.Background(), "g", "topic", 0, 2, 3, b); err != nil {
		t.Fatal(err)
	}
	got := topClients(t, pool, "t1", "r2")
	if len(got) != 1 {
		t.Fatalf("top clients of r2: %d", len(got))
	}
	for k, n := range got {
		if n != 1 || len(k) > 1024 || !strings.HasPrefix(long, k[:100]) {
			t.Fatalf("the long client counted as %.120q: %d", k, n)
		}
	}
}

// A batch's marks commit with it and not when it is fenced; the next batch
// read from the stored offset starts after them.
func TestCommitStoresMarks(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 0)
	ctx := context.Background()
	ev := func(seq uint64) []byte { return stamped(delta("t", "r", t0, 1, 0, 0, 0), "p1", seq) }
	marks := func() Marks {
		t.Helper()
		m, err := s.Marks(ctx, "g", "topic", 1)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	commit := func(from, next int64, values ...[]byte) error {
		b := NewBatchAfter(marks())
		for _, v := range values {
			if err := b.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		return s.Commit(ctx, "g", "topic", 1, from, next, b)
	}
	if err := commit(-1, 3, ev(1), ev(2), ev(3)); err != nil {
		t.Fatal(err)
	}
	if err := commit(-1, 4, ev(9)); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced commit = %v", err)
	}
	if got := marks(); !maps.Equal(got, Marks{"p1": 3}) {
		t.Fatalf("marks %v, want p1: 3 (the fenced batch's 9 not stored)", got)
	}
	if err := commit(3, 6, ev(2), ev(3), ev(4)); err != nil {
		t.Fatal(err)
	}
	if got := marks(); !maps.Equal(got, Marks{"p1": 4}) {
		t.Fatalf("marks %v, want p1: 4", got)
	}
	if other, _ := s.Marks(ctx, "g", "topic", 0); len(other) != 0 {
		t.Fatalf("partition 0 has marks %v", other)
	}
	if got := minuteRow(t, pool, "t", "r", t0.Add(-time.Minute)).allowed; got != 4 {
		t.Fatalf("allowed %d, want 4: events 2 and 3 came twice", got)
	}
	// Marks of producers not seen since the retention's cut go with the rollups.
	if _, err := s.Prune(ctx, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := marks(); len(got) != 0 {
		t.Fatalf("marks after pruning %v", got)
	}
}

func TestPruneRemovesOldRollups(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 0)
	ctx := context.Background()
	b := NewBatch()
	_ = b.Add(rejection("t1", "r1", "old", t0.Add(-48*time.Hour), false))
	_ = b.Add(rejection("t1", "r1", "new", t0, false))
	if err := s.Commit(ctx, "g", "topic", 0, -1, 2, b); err != nil {
		t.Fatal(err)
	}
	// Hours are kept longer than minutes.
	n, err := s.Prune(ctx, t0.Add(-24*time.Hour), t0.Add(-72*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want the old minute row and the old client", n, err)
	}
	if old := hourRow(t, pool, "t1", "r1", t0.Add(-48*time.Hour)); old.rejectionEvents != 1 {
		t.Errorf("the old hour went with its minutes: %+v", old)
	}
	if n, err := s.Prune(ctx, t0.Add(-24*time.Hour), t0.Add(-47*time.Hour-time.Minute)); err != nil || n != 0 {
		t.Fatalf("Prune = %d, %v; want nothing: the old hour has not ended before the cut", n, err)
	}
	if n, err := s.Prune(ctx, t0.Add(-24*time.Hour), t0.Add(-24*time.Hour)); err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want the old hour and the old client's day", n, err)
	}
	if old := hourRow(t, pool, "t1", "r1", t0.Add(-48*time.Hour)); old != (minuteCounts{}) {
		t.Errorf("the old hour stayed: %+v", old)
	}
	if kept := hourRow(t, pool, "t1", "r1", t0); kept.rejectionEvents != 1 {
		t.Errorf("the new hour: %+v, want 1 rejection event", kept)
	}
	if got := topClients(t, pool, "t1", "r1"); len(got) != 1 || got["new"] != 1 {
		t.Errorf("after pruning: %v", got)
	}
}

// produce writes values to topic, keyed by tenant as deciders do.
func produce(t *testing.T, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	produceB(t, brokers, topic, values)
}

func produceB(t testing.TB, brokers []string, topic string, values [][]byte) {
	t.Helper()
	// Acknowledged by the broker before the next call writes, as deciders
	// write: with kafka-go's default (no acks) a later call's messages may
	// land before an earlier one's, stamped events out of their order.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchSize: 1000, BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll}
	defer w.Close()
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		ev, _ := Decode(v)
		key := "bad"
		if ev != nil {
			key = fmt.Sprint(ev.GetRejection().GetTenantId(), ev.GetDelta().GetTenantId())
		}
		msgs[i] = kafka.Message{Key: []byte(key), Value: v}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// committed sums the stored next offsets of a group.
func committed(t *testing.T, pool *pgxpool.Pool, group string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(next_offset), 0) FROM analytics_offsets WHERE group_id = $1`, group).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runConsumer(t *testing.T, cfg Config) (stop func()) {
	t.Helper()
	_, stop = startConsumer(t, cfg)
	return stop
}

// startConsumer runs a consumer until stop (or the test's end).
func startConsumer(t *testing.T, cfg Config) (c *Consumer, stop func()) {
	t.Helper()
	c = NewConsumer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped bool
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return c, stop
}

// consumeTwice produces values and consumes them with a consumer of the
// topic's group in batches of batchSize until every offset is committed,
// then stops it, and does the same with more and a second consumer.
func consumeTwice(t *testing.T, brokers []string, topic string, pool *pgxpool.Pool, batchSize int, values [][]byte, more ...[]byte) {
	t.Helper()
	cfg := Config{Brokers: brokers, Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0), BatchSize: batchSize, BatchWait: 20 * time.Millisecond}
	var total int64
	for _, vs := range [][][]byte{values, more} {
		stop := runConsumer(t, cfg)
		produce(t, brokers, topic, vs...)
		total += int64(len(vs))
		waitFor(t, "every offset committed", func() bool { return committed(t, pool, cfg.Group) == total })
		stop()
	}
}

func TestConsumerRollsUpEveryPartitionOnce(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 3, []string{topic})
	pool := pgtest.Pool(t)
	var values [][]byte
	for i := range 600 {
		tenant := fmt.Sprint("t", i%3)
		values = append(values, rejection(tenant, "r1", fmt.Sprint("client", i%7), t0.Add(time.Duration(i)*time.Second), false))
	}
	values = append(values, []byte("not an event"))
	for i := range 3 {
		values = append(values, delta(fmt.Sprint("t", i), "r1", t0.Add(30*time.Second), 100, 200, 0, 0))
	}
	// A second consumer of the group finds nothing left to count.
	consumeTwice(t, broker.Addrs(), topic, pool, 50, values, delta("t0", "r1", t0.Add(30*time.Second), 1, 0, 0, 0))

	for i := range 3 {
		tenant := fmt.Sprint("t", i)
		var events int64
		for m := range 10 {
			events += minuteRow(t, pool, tenant, "r1", t0.Add(time.Duration(m)*time.Minute)).rejectionEvents
		}
		if events != 200 {
			t.Errorf("%s: %d rejection events, want 200", tenant, events)
		}
		want := minuteCounts{allowed: 100, rejected: 200, rejectionEvents: 20} // one a second over three tenants
		if i == 0 {
			want.allowed++
		}
		if got := minuteRow(t, pool, tenant, "r1", t0); got != want {
			t.Errorf("%s minute 0: %+v, want %+v", tenant, got, want)
		}
		var sum int64
		for _, n := range topClients(t, pool, tenant, "r1") {
			sum += n
		}
		if sum != 200 {
			t.Errorf("%s: top clients sum to %d, want 200", tenant, sum)
		}
	}
}

// Events a decider resent (the same producer and seq again, here as a
// write that timed out would leave them: the overlap of two writes) count
// once, across batches and across a restart of the consumer.
func TestConsumerCountsResentEventsOnce(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 3, []string{topic})
	pool := pgtest.Pool(t)
	ev := func(tenant, producer string, seq uint64) []byte {
		return stamped(delta(tenant, "r1", t0.Add(30*time.Second), 1, 0, 0, 0), producer, seq)
	}
	var values [][]byte
	for seq := range uint64(5) {
		values = append(values, ev("t0", "p1", seq+1))
	}
	for seq := uint64(3); seq <= 7; seq++ {
		values = append(values, ev("t0", "p1", seq))
	}
	values = append(values, ev("t1", "p2", 1), ev("t1", "p2", 2), ev("t1", "p2", 2))
	// A new consumer of the group knows what the last one counted.
	consumeTwice(t, broker.Addrs(), topic, pool, 2, values, ev("t0", "p1", 6), ev("t0", "p1", 7), ev("t0", "p1", 8))

	for tenant, want := range map[string]int64{"t0": 8, "t1": 2} {
		if got := minuteRow(t, pool, tenant, "r1", t0).allowed; got != want {
			t.Errorf("%s: allowed %d, want %d", tenant, got, want)
		}
	}
}

// Top clients' days are summed (migration 27) while two partitions'
// commits write top clients of one tenant's days, with clients evicted:
// the days' rows stay the sums of their hours', those summed before and
// those summed meanwhile, through pruning too.
func TestTopClientsDaysAreTheSumsOfTheirHours(t *testing.T) {
	t.Parallel()
	day := t0.Truncate(24 * time.Hour)
	pool := poolSummedUntil(t, day.Add(24*time.Hour))
	ctx := context.Background()
	s := NewStore(pool, 3)
	const rounds = 20
	round := [2]int{}
	summed := make(chan error, 1)
	commitConcurrently(t, s, rounds, func(partition int) *Batch {
		b := NewBatch()
		r := round[partition]
		round[partition]++
		if partition == 0 && r == rounds/2 {
			go func() { // the second day, while both partitions write it
				_, err := s.SumDays(ctx, day.Add(48*time.Hour))
				summed <- err
			}()
		}
		for i := range 40 { // 8 clients of 5 rules a batch, in a group of 3: evictions
			at := day.Add(time.Duration(partition*12+i%4+r%3*6) * time.Hour) // hours 0-15 and 12-27: the first two days
			_ = b.Add(rejection("t", fmt.Sprint("r", i%5), fmt.Sprint("c", (i+r)%8), at, false))
		}
		return b
	})
	if err := <-summed; err != nil {
		t.Fatal(err)
	}
	checkDays(t, pool)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT day) FROM analytics_top_clients_day WHERE rejected > 0`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d days with rows, %v; want 2", n, err)
	}
	// The hours pruned leave their days as they were, until the days are
	// pruned too.
	kept := topDays(t, pool)
	for _, before := range []time.Time{day.Add(7 * time.Hour), day.Add(24 * time.Hour), day.Add(48 * time.Hour)} {
		if _, err := s.Prune(ctx, before, day); err != nil {
			t.Fatal(err)
		}
		checkDays(t, pool)
		if got := topDays(t, pool); !maps.Equal(got, kept) {
			t.Fatalf("the days after pruning the hours before %v: %v, want %v", before, got, kept)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM analytics_top_clients`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d hours' rows left after every hour was pruned, %v", n, err)
	}
	if _, err := s.Prune(ctx, day.Add(48*time.Hour), day.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := topDays(t, pool); len(got) != 1 || got[day.Add(24*time.Hour)] != kept[day.Add(24*time.Hour)] {
		t.Fatalf("the days after pruning the first: %v, want the second's %d", got, kept[day.Add(24*time.Hour)])
	}
}

// The hours of a day not summed yet are kept past the retention, which
// is cut where the days summed end: they are the only record of their
// clients until their day is summed.
func TestPruneKeepsTheHoursOfDaysNotSummed(t *testing.T) {
	t.Parallel()
	day := t0.Truncate(24 * time.Hour)
	pool := poolSummedUntil(t, day)
	ctx := context.Background()
	s := NewStore(pool, 0)
	b := NewBatch()
	_ = b.Add(rejection("t", "r", "summed", day.Add(-2*time.Hour), false))
	_ = b.Add(rejection("t", "r", "not-summed", day.Add(2*time.Hour), false))
	if err := s.Commit(ctx, "g", "topic", 0, -1, 2, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, day.Add(5*time.Hour), day.Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := topClients(t, pool, "t", "r"); len(got) != 1 || got["not-summed"] != 1 {
		t.Fatalf("hours after pruning: %v, want not-summed's alone", got)
	}
	var from time.Time
	if err := pool.QueryRow(ctx, `SELECT hours_from FROM analytics_top_clients_days`).Scan(&from); err != nil || !from.Equal(day) {
		t.Fatalf("hours_from %v, %v; want %v", from, err, day)
	}
	if got := topDays(t, pool); len(got) != 1 || got[day.Add(-24*time.Hour)] != 1 {
		t.Fatalf("days %v, want the summed client's", got)
	}
	if _, err := s.SumDays(ctx, day.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, day.Add(5*time.Hour), day.Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := topClients(t, pool, "t", "r"); len(got) != 0 {
		t.Fatalf("hours after summing their day and pruning: %v, want none", got)
	}
	if got := topDays(t, pool); len(got) != 2 || got[day] != 1 {
		t.Fatalf("days %v, want both clients'", got)
	}
}

// The hourly jobs on the top clients' days wait for a commit of top
// clients that is open, and count its hours once. A day summed meanwhile:
// SumDays waits for the commit, whose trigger found the day not summed
// yet, and then sums what it wrote. An hour pruned meanwhile: the pruning
// waits for the commit, which added the hour's clients to its day, and
// then deletes the hour, which its day keeps (were the hour read before
// the pruning and written after, it would come back, its clients counted
// in their day twice).
func TestJobsOnTheDaysDuringACommitCountItsHoursOnce(t *testing.T) {
	t.Parallel()
	day := t0.Truncate(24 * time.Hour)
	for _, job := range []struct {
		name   string
		summed time.Time // the days summed before
		run    func(*Store) error
		hours  int64 // the hours' rows left after it
	}{
		{"SumDays", day, func(s *Store) error { _, err := s.SumDays(context.Background(), day.Add(24*time.Hour)); return err }, 1},
		{"Prune", day.Add(24 * time.Hour), func(s *Store) error { _, err := s.Prune(context.Background(), day.Add(24*time.Hour), day); return err }, 0},
	} {
		t.Run(job.name, func(t *testing.T) {
			t.Parallel()
			pool := poolSummedUntil(t, job.summed)
			ctx := context.Background()
			s := NewStore(pool, 0)
			b := NewBatch()
			_ = b.Add(rejection("t", "r1", "alice", t0, false))
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if err := s.writeTop(ctx, tx, b); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- job.run(s) }()
			pid := tx.Conn().PgConn().PID()
			waitFor(t, job.name+" to wait for the commit", func() bool {
				var waiting bool
				if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				return waiting || len(done) > 0
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			checkDays(t, pool)
			var rejected, hours int64
			if err := pool.QueryRow(ctx, `SELECT (SELECT rejected FROM analytics_top_clients_day WHERE client_key = 'alice'),
					(SELECT count(*) FROM analytics_top_clients)`).Scan(&rejected, &hours); err != nil || rejected != 1 || hours != job.hours {
				t.Fatalf("alice's day: %d rejected, %d hours' rows, %v; want 1 and %d", rejected, hours, err, job.hours)
			}
		})
	}
}

// poolSummedUntil returns a pool on a schema of the test's own, whose top
// clients' days before until are marked summed (summedUntil).
func poolSummedUntil(tb testing.TB, until time.Time) *pgxpool.Pool {
	tb.Helper()
	pool := pgtest.Pool(tb)
	summedUntil(tb, pool, until)
	return pool
}

// summedUntil marks the top clients' days before until summed, as
// SumDays would have, and the days after not.
func summedUntil(tb testing.TB, pool *pgxpool.Pool, until time.Time) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE analytics_top_clients_days SET until = $1`, until); err != nil {
		tb.Fatal(err)
	}
}

// commitConcurrently commits rounds batches of partitions 0 and 1 at once,
// each partition's in turn, and fails t if any commit fails.
func commitConcurrently(t *testing.T, s *Store, rounds int, batch func(partition int) *Batch) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for partition := range 2 {
		wg.Go(func() {
			for round := range rounds {
				from := int64(round)
				if round == 0 {
					from = -1
				}
				if err := s.Commit(context.Background(), "g", "topic", partition, from, int64(round+1), batch(partition)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a commit failed: %v", err)
	}
}

// Two partitions' commits that share a tenant's minutes (and so their
// hours' rows) at the same time neither deadlock nor lose a count.
func TestConcurrentCommitsOfOneTenantDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 0)
	const rounds, minutes = 10, 300
	commitConcurrently(t, s, rounds, func(int) *Batch {
		b := NewBatch()
		for m := range minutes {
			_ = b.Add(delta("t", "r1", t0.Add(time.Duration(m)*time.Minute+30*time.Second), 1, 0, 0, 0))
		}
		return b
	})
	if got := minuteRow(t, pool, "t", "r1", t0.Add(299*time.Minute)).allowed; got != 2*rounds {
		t.Fatalf("the last minute counted %d, want %d", got, 2*rounds)
	}
	checkHours(t, pool)
}

// Two partitions' commits that add to one top-clients group at the same
// time take turns: neither merge is lost. They share no minute, only the
// hour whose rollup row serializes them.
func TestConcurrentCommitsToOneTopClientsGroupLoseNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := NewStore(pool, 10)
	const rounds = 15
	commitConcurrently(t, s, rounds, func(partition int) *Batch {
		b := NewBatch()
		at := t0.Add(time.Duration(partition) * 30 * time.Minute)
		for i := range 20 { // alice in every batch, beside others of each partition's own
			_ = b.Add(rejection("t", "r1", "alice", at.Add(time.Duration(i)*time.Second), false))
			_ = b.Add(rejection("t", "r1", fmt.Sprint("p", partition, "-", i%3), at.Add(time.Duration(i)*time.Second), false))
		}
		return b
	})
	checkDays(t, pool)
	got := topClients(t, pool, "t", "r1")
	if got["alice"] != 2*rounds*20 {
		t.Fatalf("alice counted %d times, want %d: a merge was lost (%v)", got["alice"], 2*rounds*20, got)
	}
	for _, c := range []string{"p0-0", "p1-0"} {
		if want := int64(rounds * 7); got[c] != want {
			t.Errorf("%s counted %d times, want %d", c, got[c], want)
		}
	}
}
