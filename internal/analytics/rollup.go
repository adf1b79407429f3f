// Package analytics rolls deciders' decision events up into PostgreSQL:
// per-minute counts per (tenant, tier, rule) and the top rejected clients
// per (tenant, rule, hour), committed together with the consumer's offsets
// in one transaction, so a crash and restart neither loses nor
// double-counts an event.
package analytics

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

// MaxEventBytes bounds one event; larger messages are refused.
const MaxEventBytes = 64 << 10

// Field bounds of an event; events outside them are refused as malformed.
const (
	maxIDBytes     = 200
	maxClientBytes = 1024
)

// minuteKey identifies one per-minute rollup row: a region's
// (Event's region, "" when its decider named none).
type minuteKey struct {
	tenant, tier, rule, region string
	minute                     int64 // unix seconds, a multiple of 60
}

// minuteCounts are the additions to one rollup row.
type minuteCounts struct {
	allowed, rejected, shadow, rejectionEvents, shadowEvents, dropped int64
}

// groupKey identifies one top-clients group.
type groupKey struct {
	tenant, rule string
	hour         int64 // unix seconds, a multiple of 3600
}

// Marks are, for one partition, the highest event seq committed of each
// producer (Event.producer): an event at or below its producer's mark has
// been counted, and comes again only because its publisher resent it.
type Marks map[string]uint64

// Batch accumulates decoded events until it is committed.
type Batch struct {
	minutes map[minuteKey]*minuteCounts
	clients map[groupKey]map[string]int64
	marks   Marks // committed before this batch; read only
	next    Marks // this batch's marks where they moved past marks
	// Events counts the events added, Invalid the messages refused,
	// Duplicates the events skipped as already counted.
	Events, Invalid, Duplicates int
}

// NewBatch returns an empty Batch that skips no event it has not seen
// itself.
func NewBatch() *Batch { return NewBatchAfter(nil) }

// NewBatchAfter returns an empty Batch for a partition whose committed
// marks are marks: it skips the events at or below them.
func NewBatchAfter(marks Marks) *Batch {
	return &Batch{minutes: map[minuteKey]*minuteCounts{}, clients: map[groupKey]map[string]int64{}, marks: marks, next: Marks{}}
}

// Newest returns the start of the latest minute the batch counts in, or
// the zero time when it counts in none.
func (b *Batch) Newest() time.Time {
	var newest int64
	for k := range b.minutes {
		newest = max(newest, k.minute)
	}
	if newest == 0 {
		return time.Time{}
	}
	return time.Unix(newest, 0).UTC()
}

// Marks returns the marks that hold once the batch is committed: those it
// started after, moved on by its events. They are the next batch's.
func (b *Batch) Marks() Marks {
	if len(b.next) == 0 {
		return b.marks
	}
	m := maps.Clone(b.marks)
	if m == nil {
		m = Marks{}
	}
	maps.Copy(m, b.next)
	return m
}

// ErrMalformed is returned for a message that is not a valid event.
var ErrMalformed = errors.New("analytics: malformed event")

// Add decodes one Kafka message value and adds it to the batch. A
// malformed message is counted in Invalid and returns an error wrapping
// ErrMalformed; the batch is unchanged.
func (b *Batch) Add(value []byte) error {
	ev, err := Decode(value)
	if err != nil {
		b.Invalid++
		return err
	}
	if p := ev.Producer; p != "" {
		last, moved := b.next[p]
		if !moved {
			last = b.marks[p]
		}
		if ev.Seq <= last {
			b.Duplicates++
			return nil
		}
		b.next[p] = ev.Seq
	}
	b.Events++
	switch k := ev.Kind.(type) {
	case *sluicev1.Event_Rejection:
		r := k.Rejection
		at := r.GetAt().AsTime()
		c := b.minute(minuteKey{r.TenantId, r.Tier, r.RuleId, r.Region, at.Unix() - mod(at.Unix(), 60)})
		if r.Shadow {
			c.shadowEvents++
			return nil
		}
		c.rejectionEvents++
		g := groupKey{r.TenantId, r.RuleId, at.Unix() - mod(at.Unix(), 3600)}
		m := b.clients[g]
		if m == nil {
			m = map[string]int64{}
			b.clients[g] = m
		}
		m[r.ClientKey] = addCount(m[r.ClientKey], min(max(r.Cost, 1), policy.MaxLimit))
	case *sluicev1.Event_Delta:
		d := k.Delta
		// A delta counts at the minute its period ended.
		to := d.GetTo().AsTime().Add(-time.Microsecond).Unix()
		c := b.minute(minuteKey{d.TenantId, d.Tier, d.RuleId, d.Region, to - mod(to, 60)})
		c.allowed += d.Allowed
		c.rejected += d.Rejected
		c.shadow += d.ShadowRejected
		c.dropped += d.DroppedRejections
	}
	return nil
}

// Decode parses and checks one event: a known kind, a tenant, times in
// range, no negative counts and bounded strings.
func Decode(value []byte) (*sluicev1.Event, error) {
	if len(value) > MaxEventBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(value), MaxEventBytes)
	}
	ev := &sluicev1.Event{}
	if err := proto.Unmarshal(value, ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var tenant, tier, rule, region string
	switch k := ev.Kind.(type) {
	case *sluicev1.Event_Rejection:
		r := k.Rejection
		tenant, tier, rule, region = r.TenantId, r.Tier, r.RuleId, r.Region
		// PostgreSQL's text holds no NUL, and a commit that tried would
		// fail, and every one after it: a client's NUL is shown as U+FFFD,
		// and a key longer than a client's row takes is cut (and ended with
		// part of its hash), not dropped.
		r.ClientKey = policy.FitValue(r.ClientKey, maxClientBytes)
		switch {
		case !validTime(r.At):
			return nil, fmt.Errorf("%w: rejection time missing or out of range", ErrMalformed)
		case r.Cost < 0:
			return nil, fmt.Errorf("%w: negative cost", ErrMalformed)
		case r.RuleId == "":
			return nil, fmt.Errorf("%w: rejection without a rule", ErrMalformed)
		}
	case *sluicev1.Event_Delta:
		d := k.Delta
		tenant, tier, rule, region = d.TenantId, d.Tier, d.RuleId, d.Region
		switch {
		case !validTime(d.To) || (d.From != nil && !validTime(d.From)):
			return nil, fmt.Errorf("%w: delta period missing or out of range", ErrMalformed)
		case d.Allowed < 0 || d.Rejected < 0 || d.ShadowRejected < 0 || d.DroppedRejections < 0:
			return nil, fmt.Errorf("%w: negative count", ErrMalformed)
		}
	default:
		return nil, fmt.Errorf("%w: unknown kind", ErrMalformed)
	}
	if (ev.Producer == "") != (ev.Seq == 0) || len(ev.Producer) > maxIDBytes || ev.Seq > math.MaxInt64 {
		return nil, fmt.Errorf("%w: a producer without a seq, a seq without a producer, or either out of range", ErrMalformed)
	}
	if tenant == "" || len(tenant) > maxIDBytes || len(tier) > maxIDBytes || len(rule) > maxIDBytes || len(region) > maxIDBytes {
		return nil, fmt.Errorf("%w: tenant missing or an id over %d bytes", ErrMalformed, maxIDBytes)
	}
	if strings.ContainsRune(tenant+tier+rule+region+ev.Producer, 0) {
		return nil, fmt.Errorf("%w: NUL in an id", ErrMalformed)
	}
	return ev, nil
}

// minTime and maxTime bound event times (PostgreSQL's timestamptz and
// sanity both).
var minTime, maxTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

func validTime(ts *timestamppb.Timestamp) bool {
	if ts == nil || !ts.IsValid() {
		return false
	}
	t := ts.AsTime()
	return !t.Before(minTime) && t.Before(maxTime)
}

func (b *Batch) minute(k minuteKey) *minuteCounts {
	c := b.minutes[k]
	if c == nil {
		c = &minuteCounts{}
		b.minutes[k] = c
	}
	return c
}

// mod is the non-negative remainder.
func mod(a, m int64) int64 { return ((a % m) + m) % m }
