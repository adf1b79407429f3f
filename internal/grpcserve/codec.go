package grpcserve

import (
	"bytes"
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// malformedCodec is grpc-go's protobuf codec, but a request that does not
// decode is not an error of its own: grpc-go answers those Internal, the
// server's fault. The request is left empty, marked (an unknown field no
// sender writes), and refuseMalformed answers it InvalidArgument, the
// caller's fault, as the docs promise.
type malformedCodec struct{ encoding.CodecV2 }

// malformedMark is the unknown field that marks a request that did not
// decode: field 536870911 (the largest), of type bytes, holding "sluice".
var malformedMark = protowire.AppendBytes(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType), []byte("sluice"))

func (c malformedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	m.ProtoReflect().SetUnknown(malformedMark)
	return nil
}

// malformed reports whether req is a request malformedCodec could not
// decode.
func malformed(req any) bool {
	m, ok := req.(proto.Message)
	return ok && bytes.Equal(m.ProtoReflect().GetUnknown(), malformedMark)
}

// errMalformed answers a request that is not its message's protobuf.
var errMalformed = protoconv.GRPCError(policy.CodeInvalid, "the request is not a valid protobuf message of this call")

// refuseMalformedUnary answers InvalidArgument to a unary call whose
// request did not decode.
func refuseMalformedUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if malformed(req) {
		return nil, errMalformed
	}
	return next(ctx, req)
}

// refuseMalformedStream is refuseMalformedUnary for streaming calls: each
// message received is checked.
func refuseMalformedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	return next(srv, checkedStream{ss})
}

type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if malformed(m) {
		return errMalformed
	}
	return nil
}

// grpcCodec is the decider's gRPC codec (see malformedCodec).
var grpcCodec = malformedCodec{encoding.GetCodecV2("proto")}
