package controlplane

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// refuseBadFields refuses a unary call any of whose strings holds NUL, which
// PostgreSQL's text cannot store (the store would fail with an internal
// error), any of whose enums has a number its enum does not name
// (protobuf takes them, and a handler would read the default), or any of
// whose timestamps or durations is out of range (see badTime), or whose
// JSON did not decode (protoconv.FieldJSON):
// InvalidArgument naming each such field by its path, as
// "override.identifier" or "tenant.name". It follows the authentication,
// so that a caller without a key learns nothing of its input's shape.
func refuseBadFields() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok {
				if err := protoconv.DecodeError(m); err != nil { // JSON that did not decode (protoconv.FieldJSON)
					return nil, protoconv.ToConnectError(ctx, nil, err)
				}
				if fields := badFields(m.ProtoReflect(), ""); len(fields) > 0 {
					return nil, protoconv.ToConnectError(ctx, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid request", Fields: fields})
				}
			}
			return next(ctx, req)
		}
	}
}

// badFields names the fields of m, and of the messages in it, whose
// strings hold NUL or whose enums are unknown numbers.
func badFields(m protoreflect.Message, prefix string) []policy.FieldError {
	var out []policy.FieldError
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				out = append(out, badValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", path, i))...)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if strings.IndexByte(k.String(), 0) >= 0 {
					out = append(out, policy.FieldError{Field: path, Description: "a key must not contain NUL"})
					return true
				}
				out = append(out, badValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", path, k.String()))...)
				return true
			})
		default:
			out = append(out, badValue(fd, v, path)...)
		}
		return true
	})
	return out
}

// badTime describes what is wrong with m when it is a Timestamp outside
// years 1 to 9999 or with nanos outside [0, 1e9), or a Duration past what a
// time.Duration holds (±292 years) or with nanos of the other sign: the
// binary encoding carries such values where JSON refuses them, and handlers
// would read them clamped or normalised.
func badTime(m protoreflect.Message) string {
	switch t := m.Interface().(type) {
	case *timestamppb.Timestamp:
		if err := t.CheckValid(); err != nil {
			return "not a valid timestamp: years 1 to 9999, nanos from 0 to 999,999,999"
		}
	case *durationpb.Duration:
		if err := t.CheckValid(); err != nil || t.Seconds >= maxDurationSeconds || t.Seconds <= -maxDurationSeconds {
			return "not a valid duration: at most 292 years either way, seconds and nanos of one sign"
		}
	}
	return ""
}

// maxDurationSeconds is the most whole seconds a time.Duration holds.
const maxDurationSeconds = int64(math.MaxInt64 / int64(time.Second))

func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) []policy.FieldError {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return []policy.FieldError{{Field: path, Description: "must not contain NUL"}}
		}
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return []policy.FieldError{{Field: path, Description: fmt.Sprintf("unknown value %d", v.Enum())}}
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if d := badTime(v.Message()); d != "" {
			return []policy.FieldError{{Field: path, Description: d}}
		}
		return badFields(v.Message(), path+".")
	}
	return nil
}
