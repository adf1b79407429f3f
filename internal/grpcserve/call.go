package grpcserve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// stream is one call. A unary call's stream is pooled: its context does
// not refer to it, and it goes back to the pool once answered.
type stream struct {
	c        *conn
	id       uint32
	method   string
	m        *method
	md       metadata.MD
	mdCtx    context.Context // the connection's context with md (see metadataOf)
	deadline time.Time       // of grpc-timeout; zero: none
	gzip     bool            // the request is gzip-compressed, and so is the answer
	dec      func(any) error

	// Guarded by c.mu.
	buf        []byte // request bytes not yet read as messages
	held       int    // bytes of buf counted in c.buffered
	unacked    int    // bytes received and not yet given back to the stream's window
	sendWin    int64
	ended      bool // the request is whole (END_STREAM)
	done       bool // answered or reset: nothing more is written
	headerSent bool
	header     metadata.MD // a streaming call's own headers and trailers
	trailer    metadata.MD

	ctx  *callCtx // kept with a pooled stream
	live bool     // ctx is the running call's; guarded by c.mu
}

var streamPool = sync.Pool{New: func() any {
	st := &stream{ctx: &callCtx{}}
	st.dec = st.decodeUnary
	return st
}}

// Refusals before a call runs.
var (
	errTooLarge    = protoconv.GRPCError(policy.CodeInvalid, "the request message is larger than the 1 MiB allowed")
	errMalformed   = protoconv.GRPCError(policy.CodeInvalid, "the request is not a valid protobuf message of this call")
	errNoMessage   = protoconv.GRPCError(policy.CodeInvalid, "a unary call sends exactly one request message")
	errCompression = protoconv.GRPCError(policy.CodeInvalid, "a message is compressed without a grpc-encoding, or does not decompress")
	errPanic       = protoconv.GRPCError(policy.CodeUnknown, "the decider failed on this request")
	errCancelled   = protoconv.GRPCError(policy.CodeCanceled, "the call was cancelled")
)

// open starts the call a client opened on stream sid with the header
// fields in c.fields. It runs on the reader goroutine.
func (c *conn) open(sid uint32, end bool) {
	var path, ctype, timeout, enc string
	n := 0
	for _, f := range c.fields {
		switch f.Name {
		case ":path":
			path = f.Value
		case "content-type":
			ctype = f.Value
		case "grpc-timeout":
			timeout = f.Value
		case "grpc-encoding":
			enc = f.Value
		}
		if inMetadata(f.Name) {
			n++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closed || len(c.streams) >= MaxStreams {
		c.wbuf = appendRSTStream(c.wbuf, sid, 0x7) // REFUSED_STREAM: the client may retry it elsewhere
		c.kick()
		return
	}
	if ctype != "application/grpc" && !strings.HasPrefix(ctype, "application/grpc+") && !strings.HasPrefix(ctype, "application/grpc;") {
		c.wbuf = appendHeaders(c.wbuf, sid, status415, true, c.peerFrame)
		c.kick()
		return
	}
	m := c.s.methods[path]
	var err error
	var deadline time.Time
	switch {
	case m == nil:
		err = protoconv.GRPCError(policy.CodeUnimplemented, "unknown method "+path)
	case enc != "" && enc != "identity" && enc != "gzip":
		err = protoconv.GRPCError(policy.CodeUnimplemented, "grpc-encoding "+enc+" is not supported: gzip is")
	case timeout != "":
		d, ok := parseTimeout(timeout)
		if !ok {
			err = protoconv.GRPCError(policy.CodeInvalid, "malformed grpc-timeout "+timeout)
		}
		deadline = time.Now().Add(d)
	}
	if err != nil {
		c.hbuf = appendStatus(append(c.hbuf[:0], responseHeaders...), err)
		c.wbuf = appendHeaders(c.wbuf, sid, c.hbuf, true, c.peerFrame)
		c.kick()
		return
	}
	md, mdCtx := c.metadataOf(n)
	var st *stream
	if m.stream == nil {
		st = streamPool.Get().(*stream)
	} else {
		st = &stream{}
	}
	st.c, st.id, st.method, st.m, st.md, st.mdCtx, st.deadline, st.gzip = c, sid, path, m, md, mdCtx, deadline, enc == "gzip"
	st.sendWin = c.peerWin
	c.streams[sid] = st
	if m.stream != nil {
		c.startStream(st)
	}
	if end {
		c.endOfRequest(st)
	}
}

// metadataOf is the metadata of a call, from the n fields of c.fields
// that are metadata. A connection's calls usually send the same metadata
// (Envoy's, the check key's): a call whose metadata fields are the last
// call's shares its metadata, read-only as every call's is
// (metadata.FromIncomingContext copies it).
func (c *conn) metadataOf(n int) (metadata.MD, context.Context) {
	if n == 0 {
		return nil, c.ctx
	}
	if c.lastMD != nil && n == len(c.lastFields) {
		i := 0
		for _, f := range c.fields {
			if inMetadata(f.Name) {
				if l := c.lastFields[i]; l.Name != f.Name || l.Value != f.Value {
					break
				}
				i++
			}
		}
		if i == n {
			return c.lastMD, c.lastCtx
		}
	}
	md := make(metadata.MD, n)
	vals := make([]string, n)
	c.lastFields = c.lastFields[:0]
	i := 0
	for _, f := range c.fields {
		if !inMetadata(f.Name) {
			continue
		}
		c.lastFields = append(c.lastFields, hpack.HeaderField{Name: f.Name, Value: f.Value})
		v := f.Value
		if strings.HasSuffix(f.Name, "-bin") {
			v = decodeBinary(v)
		}
		if old, ok := md[f.Name]; ok {
			md[f.Name] = append(old, v)
			continue
		}
		vals[i] = v
		md[f.Name] = vals[i : i+1 : i+1]
		i++
	}
	c.lastMD = md
	c.lastCtx = decision.WithMetadata(metadata.NewIncomingContext(c.ctx, md), md)
	return md, c.lastCtx
}

// inMetadata reports whether a request header field reaches the call's
// metadata, as grpc-go passes them: every field but the pseudo-headers
// (":authority" excepted) and gRPC's own transport fields.
func inMetadata(name string) bool {
	switch name {
	case ":authority":
		return true
	case "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-message-type", "grpc-status", "grpc-message", "grpc-status-details-bin":
		return false
	}
	return !strings.HasPrefix(name, ":")
}

// decodeBinary is a -bin header's value, base64 with or without padding;
// a value that is neither is passed as it is.
func decodeBinary(v string) string {
	enc := base64.RawStdEncoding
	if len(v)%4 == 0 {
		enc = base64.StdEncoding
	}
	b, err := enc.DecodeString(v)
	if err != nil {
		return v
	}
	return string(b)
}

// parseTimeout reads grpc-timeout: up to 8 digits and a unit.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, r := range v[:len(v)-1] {
		if r < '0' || r > '9' {
			return 0, false
		}
		n = n*10 + int64(r-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(1<<63-1)/int64(unit) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * unit, true
}

// callContext is a call's context: its metadata, its deadline, and
// cancelled when the client resets the call or the connection ends.
func (c *conn) callContext(st *stream) context.Context {
	if st.ctx == nil {
		st.ctx = &callCtx{}
	}
	st.ctx.start(st.mdCtx, st.deadline)
	c.mu.Lock()
	st.live = true
	done := st.done
	c.mu.Unlock()
	if done { // reset before it ran
		st.ctx.cancel()
	}
	return st.ctx
}

// endContext ends a call's use of its context.
func (c *conn) endContext(st *stream) {
	c.mu.Lock()
	st.live = false
	c.mu.Unlock()
	st.ctx.finish()
}

// runUnary runs a unary call whose request is whole, answers it and
// releases its stream.
func (c *conn) runUnary(st *stream) {
	ctx := c.callContext(st)
	res, err := c.callUnary(ctx, st)
	c.answer(st, res, err)
	c.endContext(st)
	c.release(st)
}

func (c *conn) callUnary(ctx context.Context, st *stream) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.svc.Recovered(ctx, "grpc", r)
			res, err = nil, errPanic
		}
	}()
	if st.m.door {
		if err := c.s.door(st.md); err != nil {
			return nil, err
		}
	}
	return st.m.unary(st.m.impl, ctx, st.dec, nil)
}

// door refuses, before its message is read, a check of a tenant that
// crowds a full decider (decision.Service.Door), from the key in its
// metadata. A call it cannot place (no key, an invalid one) goes on, for
// its handler to answer.
func (s *Server) door(md metadata.MD) error {
	// The handler authenticates the key anyway: hash it here only when
	// the decider is full and a tenant may be crowding it.
	if !s.svc.Full() || s.svc.Authenticate == nil {
		return nil
	}
	auth := md["authorization"]
	if len(auth) == 0 {
		return nil
	}
	t, err := s.svc.Authenticate(auth[0])
	if err != nil {
		return nil
	}
	if err := s.svc.Door(t); err != nil {
		return protoconv.GRPCError(decision.ErrCrowded.Code, decision.ErrCrowded.Message)
	}
	return nil
}

// decodeUnary decodes a unary call's one message into v. The request is
// whole: the reader no longer touches buf.
func (st *stream) decodeUnary(v any) error {
	msg, rest, err := st.message(st.buf)
	if err != nil {
		return err
	}
	if msg == nil || len(rest) > 0 {
		return errNoMessage
	}
	return unmarshal(msg, v)
}

// A Decoder is a request that decodes its own protobuf wire form,
// without protobuf's reflection. A handler may give its decode function a
// Decoder in place of a proto.Message; it must copy what it keeps of b.
type Decoder interface{ DecodeProto(b []byte) error }

// An Encoder is an answer that appends its own protobuf wire form to b.
type Encoder interface{ AppendProto(b []byte) []byte }

// A Recycler is an answer the server hands back once it has encoded it,
// for its handler to pool.
type Recycler interface{ Recycle() }

func unmarshal(b []byte, v any) error {
	var err error
	switch m := v.(type) {
	case Decoder:
		err = m.DecodeProto(b)
	case proto.Message:
		err = proto.Unmarshal(b, m)
	default:
		return errMalformed
	}
	if err != nil {
		return errMalformed
	}
	return nil
}

// message splits the first whole message off b, decompressed; msg is nil
// when b does not hold a whole one yet.
func (st *stream) message(b []byte) (msg, rest []byte, err error) {
	if len(b) < 5 {
		return nil, b, nil
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if n > maxMessage {
		return nil, b, errTooLarge
	}
	if len(b) < 5+int(n) {
		return nil, b, nil
	}
	msg, rest = b[5:5+n], b[5+n:]
	switch b[0] {
	case 0:
		return msg, rest, nil
	case 1:
		if !st.gzip {
			return nil, rest, errCompression
		}
		msg, err = gunzip(msg)
		return msg, rest, err
	default:
		return nil, rest, errMalformed
	}
}

// answer writes a unary call's answer: its message and status, or its
// error.
func (c *conn) answer(st *stream, res any, err error) {
	var bp *[]byte
	var b []byte
	if err == nil {
		bp = bufPool.Get().(*[]byte)
		b, err = marshalMessage((*bp)[:0], res, st.gzip)
	}
	if r, ok := res.(Recycler); ok {
		r.Recycle()
	}
	c.mu.Lock()
	if err == nil {
		c.writeHeaders(st)
		c.writeData(st, b)
	}
	c.writeTrailers(st, err)
	c.mu.Unlock()
	if bp != nil {
		if cap(b) <= 64<<10 {
			*bp = b[:0]
		}
		bufPool.Put(bp)
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// marshalMessage appends res as a gRPC message, its 5-byte prefix first.
func marshalMessage(b []byte, res any, gz bool) ([]byte, error) {
	b = append(b, 0, 0, 0, 0, 0)
	switch m := res.(type) {
	case Encoder:
		b = m.AppendProto(b)
	case proto.Message:
		var err error
		if b, err = (proto.MarshalOptions{}).MarshalAppend(b, m); err != nil {
			return b, protoconv.GRPCError(policy.CodeUnknown, "the answer does not encode")
		}
	default:
		return b, protoconv.GRPCError(policy.CodeUnknown, "the answer is not a protobuf message")
	}
	if gz {
		z, err := gzipped(b[5:])
		if err != nil {
			return b, protoconv.GRPCError(policy.CodeUnknown, "the answer does not compress")
		}
		b = append(b[:5], z...)
		b[0] = 1
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b, nil
}

// release forgets an answered call and gives its request bytes back to
// the connection's window; a unary call's stream goes back to the pool.
func (c *conn) release(st *stream) {
	c.mu.Lock()
	c.releaseLocked(st)
	c.mu.Unlock()
	if st.m.stream == nil {
		st.reset()
		streamPool.Put(st)
	}
}

func (c *conn) releaseLocked(st *stream) {
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
	c.buffered -= st.held
	st.held = 0
	c.ackConn()
	if c.flushExit && len(c.streams) == 0 {
		c.kick() // the writer closes a drained connection
	}
}

func (st *stream) reset() {
	buf := st.buf[:0]
	if cap(buf) > 64<<10 {
		buf = nil
	}
	dec, ctx := st.dec, st.ctx
	*st = stream{buf: buf, dec: dec, ctx: ctx}
}

// endStream ends a call the client reset, or one of a connection that
// closed: nothing more is written for it, a streaming call's context is
// cancelled, and a unary call that never ran is released. c.mu is held.
func (c *conn) endStream(st *stream) {
	if st.done && c.streams[st.id] != st {
		return
	}
	st.done = true
	delete(c.streams, st.id)
	if st.live {
		st.ctx.cancel()
	}
	c.cond.Broadcast()
	if st.m.stream == nil && !st.ended { // never dispatched: no worker holds it
		c.releaseLocked(st)
		st.reset()
		streamPool.Put(st)
	}
}

// refuse answers a call with err before its request is whole, and tells
// the client to send no more of it. c.mu is held.
func (c *conn) refuse(st *stream, err error) {
	c.writeTrailers(st, err)
	c.wbuf = appendRSTStream(c.wbuf, st.id, 0) // NO_ERROR: stop sending
	c.endStream(st)
}
