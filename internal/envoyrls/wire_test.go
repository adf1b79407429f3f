package envoyrls

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzDecodeProto holds the decider's own reading of a request to
// protobuf's: for any bytes, DecodeProto refuses what proto.Unmarshal
// refuses, and reads what it reads.
func FuzzDecodeProto(f *testing.F) {
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	for _, seed := range []*rlsv3.RateLimitRequest{
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("client_id", "alice")}}}},
		{Domain: "acme", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("client_id", "a"), entry("route", "/login")}, HitsAddend: wrapperspb.UInt64(0)},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("client_id", "b")}, HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("", "x")},
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)}}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}}, {}, {}, {}, {}}},
	} {
		b, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A known field of another wire type, an unknown group, a message
	// field twice (merged), and a string that is not UTF-8.
	f.Add([]byte{0x08, 0x01, 0x5b, 0x08, 0x01, 0x5c, 0x0a, 0x01, 'a'})
	f.Add([]byte{0x12, 0x0a, 0x12, 0x02, 0x08, 0x05, 0x12, 0x04, 0x10, 0x02, 0x1a, 0x00})
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		perr := proto.Unmarshal(b, &req)
		got := newCall()
		defer got.Recycle()
		werr := got.DecodeProto(b)
		if (perr == nil) != (werr == nil) {
			t.Fatalf("%x: proto.Unmarshal: %v, DecodeProto: %v", b, perr, werr)
		}
		if perr != nil {
			return
		}
		want := newCall()
		defer want.Recycle()
		want.fromProto(&req)
		if got.domain != want.domain || got.hitsAddend != want.hitsAddend || !reflect.DeepEqual(got.descs, want.descs) ||
			!reflect.DeepEqual(got.entries, want.entries) {
			t.Fatalf("%x: read %+v %+v, protobuf reads %+v %+v", b, got.descs, got.entries, want.descs, want.entries)
		}
	})
}

// TestAppendProtoIsTheMessage holds the decider's own writing of answers
// to protobuf's: random answers read back by proto.Unmarshal are the
// messages toProto builds of them.
func TestAppendProtoIsTheMessage(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		b := make([]byte, rng.IntN(3)*rng.IntN(120))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	for range 2000 {
		c := newCall()
		c.over = rng.IntN(2) == 0
		c.rawBody = str()
		for range rng.IntN(6) {
			st := status{over: rng.IntN(2) == 0, remaining: rng.Uint32() >> rng.IntN(33), hasLimit: rng.IntN(3) > 0}
			if st.hasLimit {
				st.name, st.requestsPerUnit = str(), rng.Uint32()>>rng.IntN(33)
				st.unit = rlsv3.RateLimitResponse_RateLimit_Unit(rng.IntN(8))
				st.multiplier = rng.Uint32() >> rng.IntN(33)
				st.reset = time.Duration(rng.Int64N(int64(400 * 24 * time.Hour)))
			}
			c.statuses = append(c.statuses, st)
		}
		for range rng.IntN(12) {
			c.keys, c.vals = append(c.keys, str()), append(c.vals, str())
		}
		b := c.AppendProto(nil)
		var got rlsv3.RateLimitResponse
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if want := c.toProto(); !proto.Equal(&got, want) {
			t.Fatalf("wrote %v, want %v", &got, want)
		}
		c.Recycle()
	}
}

// TestDecodeProtoSharesOneCopy: a request's strings are parts of one
// copy of its bytes, which later use of the bytes does not change.
func TestDecodeProtoSharesOneCopy(t *testing.T) {
	t.Parallel()
	b := protowire.AppendTag(nil, requestDomain, protowire.BytesType)
	b = protowire.AppendString(b, "acme")
	d := protowire.AppendTag(nil, entryKey, protowire.BytesType)
	d = protowire.AppendString(d, "client_id")
	d = protowire.AppendTag(d, entryValue, protowire.BytesType)
	d = protowire.AppendString(d, "alice")
	b = appendMessage(b, requestDescriptors, appendMessage(nil, descriptorEntries, d))
	c := newCall()
	defer c.Recycle()
	if err := c.DecodeProto(b); err != nil {
		t.Fatal(err)
	}
	clear(b)
	if c.domain != "acme" || len(c.entries) != 1 || c.entries[0].Key != "client_id" || c.entries[0].Value != "alice" {
		t.Fatalf("read %q %+v", c.domain, c.entries)
	}
}
