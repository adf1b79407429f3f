package grpcserve

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// FuzzGRPCCodec: the decider's gRPC codec takes any bytes without
// panicking; what protobuf decodes it decodes alike, and anything else it
// leaves marked malformed, which a well-formed request never is.
func FuzzGRPCCodec(f *testing.F) {
	good, _ := proto.Marshal(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "a"}}, Cost: 2})
	f.Add(good)
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Add(malformedMark)
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &sluicev1.CheckRequest{}
		if err := grpcCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		want := &sluicev1.CheckRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			if !malformed(m) {
				t.Fatalf("%x: proto refuses it (%v), the codec did not mark it", b, err)
			}
			return
		}
		if !proto.Equal(m, want) {
			t.Fatalf("%x: %v, want %v", b, m, want)
		}
	})
}
