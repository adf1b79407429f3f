package redisengine

import (
	"errors"
	"testing"
	"time"
)

// A tenant's backlog delays another tenant's call by one round, not by
// the backlog: with 1,000 of A's calls queued first (some in batches of
// 100), B's call goes out in the first pipeline, and each pipeline gives
// A and B turns of equal size while both wait.
func TestFairQueueServesEachTenantInTurn(t *testing.T) {
	q := newFairQueue(128)
	newCall := func() *call { return &call{done: newDone()} }
	for range 5 {
		unit := []*call{newCall()}
		for range 99 {
			unit = append(unit, newCall())
		}
		unit[0].rest = unit[1:]
		if _, err := q.push("a", unit[0]); err != nil {
			t.Fatal(err)
		}
	}
	for range 500 {
		if _, err := q.push("a", newCall()); err != nil {
			t.Fatal(err)
		}
	}
	var bs []*call
	for range 40 {
		c := newCall()
		bs = append(bs, c)
		if _, err := q.push("b", c); err != nil {
			t.Fatal(err)
		}
	}
	isB := map[*call]bool{}
	for _, c := range bs {
		isB[c] = true
	}
	first := q.take(nil, 128)
	nb := 0
	for _, c := range first {
		if isB[c] {
			nb++
		}
	}
	// A's first unit (100 calls) waits for a deficit of 112; meanwhile B
	// sends 16 a round: B's 40 all go in the first pipeline.
	if nb != 40 {
		t.Fatalf("the first pipeline of %d carries %d of B's 40 calls, want all 40", len(first), nb)
	}
	taken := len(first)
	q.answered(first)
	for {
		b := q.take(nil, 128)
		if len(b) == 0 {
			break
		}
		taken += len(b)
		q.answered(b)
	}
	if taken != 1040 {
		t.Fatalf("%d calls taken, want 1040", taken)
	}
	if len(q.active) != 0 || len(q.flows) != 0 {
		t.Fatalf("an empty queue keeps %d active flows, %d flows", len(q.active), len(q.flows))
	}
}

// A flow is heavy while more than two quanta of its calls are not yet
// answered, waiting or out in a pipeline; while one is, a light flow's
// caller is told to send the light calls itself, and takeLight gives them
// and no heavy flow's.
func TestFairQueueLightFlowsGoAtOnceBesideAHeavyOne(t *testing.T) {
	q := newFairQueue(2 * quantum)
	newCall := func() *call { return &call{done: newDone()} }
	for range 3 * quantum {
		if light, err := q.push("flood", newCall()); err != nil || light {
			t.Fatalf("the flood's call: light %v, %v", light, err)
		}
	}
	sent := q.take(nil, 128) // out in a pipeline: still the flood's
	if len(sent) != 3*quantum {
		t.Fatalf("%d taken, want %d", len(sent), 3*quantum)
	}
	b := newCall()
	if light, err := q.push("quiet", b); err != nil || !light {
		t.Fatalf("a quiet tenant's call beside a flood in flight: light %v, %v; want light", light, err)
	}
	if got := q.takeLight(nil, 128); len(got) != 1 || got[0] != b {
		t.Fatalf("takeLight gave %d calls, want the quiet tenant's one", len(got))
	}
	q.answered(sent)
	if light, err := q.push("quiet", newCall()); err != nil || light {
		t.Fatalf("once the flood is answered: light %v, %v; want not light (nothing is heavy)", light, err)
	}
}

// A queued call fails at its deadline, unsent, with the error the engine
// gives; the others stay queued, and earliest follows them.
func TestFairQueueFailsCallsAtTheirDeadline(t *testing.T) {
	q := newFairQueue(128)
	now := time.Now()
	late := &call{done: newDone(), deadline: now.Add(-time.Millisecond)}
	live := &call{done: newDone(), deadline: now.Add(time.Hour)}
	none := &call{done: newDone()}
	for _, c := range []*call{late, live, none} {
		if _, err := q.push("a", c); err != nil {
			t.Fatal(err)
		}
	}
	errLate := errors.New("late")
	q.sweep(now, func() error { return errLate })
	select {
	case <-late.done:
		if late.err != errLate {
			t.Fatalf("the late call failed with %v", late.err)
		}
	default:
		t.Fatal("the late call is still queued")
	}
	if !q.earliest.Equal(live.deadline) {
		t.Fatalf("earliest %v, want the live call's %v", q.earliest, live.deadline)
	}
	if got := q.take(nil, 10); len(got) != 2 || got[0] != live || got[1] != none {
		t.Fatalf("taken %v, want the live call and the one without a deadline", got)
	}
	q.close()
	if _, err := q.push("a", &call{done: newDone()}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a push after close: %v", err)
	}
}
