package protoconv

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// StrictJSON is the handler option of Sluice's Connect services for
// Connect-JSON requests: connect-go's own codec, but refusing a field the
// message does not have (InvalidArgument, naming it) where connect-go
// drops it, so that a misspelt field ("cots", "limt") is an error and not
// a request that silently does something else — as POST /v1/check
// refuses an unknown member. Binary protobuf keeps proto's rules.
func StrictJSON() connect.HandlerOption {
	return connect.WithHandlerOptions(connect.WithCodec(strictJSON{"json"}), connect.WithCodec(strictJSON{"json; charset=utf-8"}))
}

type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (c strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	return protojson.Unmarshal(b, pm)
}
