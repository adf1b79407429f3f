package grpcserve

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// A connection that keeps a repeated header block's fields decodes every
// block as a decoder of its own would, whatever the client's encoder does
// to its table between them: new fields indexed, fields never indexed,
// the table resized.
func TestKeptHeaderBlocksDecodeAsEveryBlock(t *testing.T) {
	t.Parallel()
	c := newConn(&Server{}, nil)
	var want []hpack.HeaderField
	ref := hpack.NewDecoder(4096, func(f hpack.HeaderField) { want = append(want, f) })
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	pool := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}, {Name: "grpc-timeout", Value: "20m"},
		{Name: "authorization", Value: "Bearer sk_check_a", Sensitive: true}, {Name: "authorization", Value: "Bearer sk_check_b", Sensitive: true},
		{Name: "x-request-id", Value: "a"}, {Name: "x-request-id", Value: "b"}}
	rng := rand.New(rand.NewPCG(1, 2))
	var fields []hpack.HeaderField
	kept := 0
	for round := range 5000 {
		if round == 0 || rng.IntN(4) == 0 { // else the last block's fields again
			fields = fields[:0]
			for _, f := range pool {
				if rng.IntN(2) == 0 {
					fields = append(fields, f)
				}
			}
		}
		if rng.IntN(50) == 0 {
			enc.SetMaxDynamicTableSize(uint32(rng.IntN(4096)))
		}
		buf.Reset()
		for _, f := range fields {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		block := buf.Bytes()
		if c.blockKept && bytes.Equal(block, c.lastBlock) {
			kept++
		}
		if err := c.decodeBlock(block); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		want = want[:0]
		if _, err := ref.Write(block); err != nil {
			t.Fatal(err)
		}
		if err := ref.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.fields, want) {
			t.Fatalf("round %d: decoded %v, want %v", round, c.fields, want)
		}
	}
	if kept < 1000 {
		t.Fatalf("%d of 5000 blocks were kept ones: the test no longer tries them", kept)
	}
}

// A block that changes the table is decoded every time, even when it is
// the last one again: a client may send the same literal to be indexed
// twice, and then name the second copy.
func TestBlocksThatIndexAreDecodedAgain(t *testing.T) {
	t.Parallel()
	c := newConn(&Server{}, nil)
	indexA := []byte{0x40, 0x01, 'a', 0x01, '1'}                     // a: 1, incremental indexing (62)
	indexB := []byte{0x40, 0x01, 'b', 0x01, '2'}                     // b: 2, pushing a: 1 to 63
	for _, block := range [][]byte{indexA, indexA, indexB, {0xc0}} { // 0xc0: entry 64, the first a: 1
		if err := c.decodeBlock(block); err != nil {
			t.Fatalf("block %x: %v", block, err)
		}
	}
	if want := []hpack.HeaderField{{Name: "a", Value: "1"}}; !slices.Equal(c.fields, want) {
		t.Fatalf("entry 64 decoded as %v, want %v", c.fields, want)
	}
}

// stateless reads any bytes without failing: a block it cannot read is
// decoded, and the decoder refuses it.
func FuzzStateless(f *testing.F) {
	f.Add([]byte{0x82, 0x86, 0x10, 0x01, 'a', 0x01, 'b'})
	f.Add([]byte{0x0f, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) { stateless(b) })
}
