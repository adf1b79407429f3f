package envoyrls

import (
	"context"
	"errors"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// wireDesc is the rate limit service as the decider's own server
// (grpcserve) serves it: the handler decodes the request into a pooled
// call (grpcserve.Decoder) and answers the call itself, which encodes
// itself (grpcserve.Encoder) and goes back to the pool once written
// (grpcserve.Recycler). No protobuf message is built either way.
var wireDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: rlsv3.RateLimitService_ServiceDesc.HandlerType,
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitWire}},
	Metadata:    rlsv3.RateLimitService_ServiceDesc.Metadata,
}

func shouldRateLimitWire(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	c := newCall()
	if err := dec(c); err != nil {
		c.Recycle()
		return nil, err
	}
	if err := srv.(*RLS).answer(ctx, c); err != nil {
		c.Recycle()
		return nil, err
	}
	return c, nil
}

var (
	errInvalidUTF8 = errors.New("a string field is not UTF-8")
	errFieldNumber = errors.New("a field number out of range")
)

// The fields read and written, as in envoy/service/ratelimit/v3/rls.proto,
// envoy/extensions/common/ratelimit/v3/ratelimit.proto and the well-known
// types.
const (
	requestDomain      = 1 // RateLimitRequest
	requestDescriptors = 2
	requestHitsAddend  = 3

	descriptorEntries    = 1 // RateLimitDescriptor
	descriptorLimit      = 2
	descriptorHitsAddend = 3

	entryKey   = 1 // RateLimitDescriptor.Entry
	entryValue = 2

	overrideRequestsPerUnit = 1 // RateLimitDescriptor.RateLimitOverride
	overrideUnit            = 2
	overrideUnitMultiplier  = 3

	wrapperValue = 1 // UInt32Value, UInt64Value

	responseOverallCode = 1 // RateLimitResponse
	responseStatuses    = 2
	responseHeaders     = 3
	responseRawBody     = 5

	statusCode      = 1 // RateLimitResponse.DescriptorStatus
	statusLimit     = 2
	statusRemaining = 3
	statusReset     = 4

	limitRequestsPerUnit = 1 // RateLimitResponse.RateLimit
	limitUnit            = 2
	limitName            = 3
	limitUnitMultiplier  = 4

	durationSeconds = 1 // Duration
	durationNanos   = 2

	headerKey   = 1 // HeaderValue
	headerValue = 2
)

// field is one field of a message on the wire: a varint's value in x, a
// length-delimited one's in v.
type field struct {
	num protowire.Number
	typ protowire.Type
	x   uint64
	v   []byte
}

// next splits b's first field off, skipping over a value of any other
// type than varint and length-delimited, as an unknown field.
func next(b []byte) (f field, rest []byte, err error) {
	var n int
	f.num, f.typ, n = protowire.ConsumeTag(b)
	switch {
	case n < 0:
		return f, nil, protowire.ParseError(n)
	case !f.num.IsValid():
		return f, nil, errFieldNumber
	}
	b = b[n:]
	switch f.typ {
	case protowire.VarintType:
		f.x, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.v, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(f.num, f.typ, b)
	}
	if n < 0 {
		return f, nil, protowire.ParseError(n)
	}
	return f, b[n:], nil
}

// arena hands out the strings of one request as parts of one copy of
// its bytes.
type arena struct {
	b   []byte
	all string
}

// of is v, a part of s.b, as a string; it must be UTF-8, as protobuf's
// strings must.
func (s *arena) of(v []byte) (string, error) {
	if !utf8.Valid(v) {
		return "", errInvalidUTF8
	}
	if s.all == "" {
		s.all = string(s.b)
	}
	at := cap(s.b) - cap(v)
	return s.all[at : at+len(v)], nil
}

// fields calls each with every field of the message b, in order, until
// it returns an error.
func fields(b []byte, each func(f field) error) error {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		if err := each(f); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// DecodeProto reads c's request from its wire form (RateLimitRequest) as
// proto.Unmarshal reads it into the message: a known field of another
// wire type is an unknown one, unknown ones are skipped, a message field
// met twice is merged, and strings must be UTF-8 (grpcserve.Decoder).
func (c *call) DecodeProto(b []byte) error {
	strs := arena{b: b}
	return fields(b, func(f field) (err error) {
		switch {
		case f.num == requestDomain && f.typ == protowire.BytesType:
			c.domain, err = strs.of(f.v)
		case f.num == requestDescriptors && f.typ == protowire.BytesType:
			err = c.decodeDescriptor(&strs, f.v)
		case f.num == requestHitsAddend && f.typ == protowire.VarintType:
			c.hitsAddend = uint32(f.x)
		}
		return err
	})
}

func (c *call) decodeDescriptor(strs *arena, b []byte) error {
	d := c.addDescriptor()
	return fields(b, func(f field) (err error) {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case descriptorEntries:
			err = c.decodeEntry(strs, f.v)
			d.to = len(c.entries)
		case descriptorLimit:
			d.hasLimit = true
			err = d.limit.decode(f.v)
		case descriptorHitsAddend:
			d.hasHits = true
			err = decodeWrapper(f.v, &d.hits)
		}
		return err
	})
}

func (c *call) decodeEntry(strs *arena, b []byte) error {
	var e struct{ Key, Value string }
	err := fields(b, func(f field) (err error) {
		switch {
		case f.typ != protowire.BytesType:
		case f.num == entryKey:
			e.Key, err = strs.of(f.v)
		case f.num == entryValue:
			e.Value, err = strs.of(f.v)
		}
		return err
	})
	c.entries = append(c.entries, e)
	return err
}

func (o *override) decode(b []byte) error {
	return fields(b, func(f field) (err error) {
		switch {
		case f.num == overrideRequestsPerUnit && f.typ == protowire.VarintType:
			o.requestsPerUnit = uint32(f.x)
		case f.num == overrideUnit && f.typ == protowire.VarintType:
			o.unit = int32(f.x)
		case f.num == overrideUnitMultiplier && f.typ == protowire.BytesType:
			o.hasMultiplier = true
			x := uint64(o.multiplier)
			err = decodeWrapper(f.v, &x)
			o.multiplier = uint32(x)
		}
		return err
	})
}

// decodeWrapper merges a UInt32Value or UInt64Value into *x.
func decodeWrapper(b []byte, x *uint64) error {
	return fields(b, func(f field) error {
		if f.num == wrapperValue && f.typ == protowire.VarintType {
			*x = f.x
		}
		return nil
	})
}

// AppendProto appends c's answer in its wire form, RateLimitResponse
// (grpcserve.Encoder).
func (c *call) AppendProto(b []byte) []byte {
	code := rlsv3.RateLimitResponse_OK
	if c.over {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	b = appendVarint(b, responseOverallCode, uint64(code))
	var scratch [256]byte
	for i := range c.statuses {
		b = appendMessage(b, responseStatuses, c.statuses[i].appendProto(scratch[:0]))
	}
	for i := range c.keys {
		h := appendString(scratch[:0], headerKey, c.keys[i])
		b = appendMessage(b, responseHeaders, appendString(h, headerValue, c.vals[i]))
	}
	return appendString(b, responseRawBody, c.rawBody)
}

// appendProto appends st as a DescriptorStatus.
func (st *status) appendProto(b []byte) []byte {
	code := rlsv3.RateLimitResponse_OK
	if st.over {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	b = appendVarint(b, statusCode, uint64(code))
	var scratch [160]byte
	if st.hasLimit {
		l := appendVarint(scratch[:0], limitRequestsPerUnit, uint64(st.requestsPerUnit))
		l = appendVarint(l, limitUnit, uint64(st.unit))
		l = appendString(l, limitName, st.name)
		if st.multiplier != 0 {
			var w [8]byte
			l = appendMessage(l, limitUnitMultiplier, appendVarint(w[:0], wrapperValue, uint64(st.multiplier)))
		}
		b = appendMessage(b, statusLimit, l)
	}
	b = appendVarint(b, statusRemaining, uint64(st.remaining))
	if st.hasLimit {
		var d [24]byte
		r := appendVarint(d[:0], durationSeconds, uint64(int64(st.reset/1e9)))
		r = appendVarint(r, durationNanos, uint64(int64(int32(st.reset%1e9))))
		b = appendMessage(b, statusReset, r)
	}
	return b
}

// appendVarint appends a varint field, unless it is 0 (proto3's default,
// never sent).
func appendVarint(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

// appendString appends a string field, unless it is empty.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendMessage appends a message field, m its encoded fields: a message
// that is set is sent even when it is empty.
func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
