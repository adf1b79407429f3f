package controlplane

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// refuseNUL refuses a unary call any of whose strings holds NUL, which
// PostgreSQL's text cannot store (the store would fail with an internal
// error): InvalidArgument naming each such field by its path, as
// "override.identifier" or "tenant.name". It follows the authentication,
// so that a caller without a key learns nothing of its input's shape.
func refuseNUL() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok {
				if fields := nulFields(m.ProtoReflect(), ""); len(fields) > 0 {
					return nil, protoconv.ToConnectError(ctx, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid request", Fields: fields})
				}
			}
			return next(ctx, req)
		}
	}
}

// nulFields names the fields of m, and of the messages in it, whose
// strings hold NUL.
func nulFields(m protoreflect.Message, prefix string) []policy.FieldError {
	var out []policy.FieldError
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				out = append(out, nulValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", path, i))...)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if strings.IndexByte(k.String(), 0) >= 0 {
					out = append(out, policy.FieldError{Field: path, Description: "a key must not contain NUL"})
					return true
				}
				out = append(out, nulValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", path, k.String()))...)
				return true
			})
		default:
			out = append(out, nulValue(fd, v, path)...)
		}
		return true
	})
	return out
}

func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) []policy.FieldError {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return []policy.FieldError{{Field: path, Description: "must not contain NUL"}}
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return nulFields(v.Message(), path+".")
	}
	return nil
}
