package grpcserve

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Header blocks are encoded without HPACK's dynamic table: static-table
// references and literals "without indexing" (RFC 7541 6.1, 6.2.2), so
// that no state is shared between calls or with the client's table size.

// responseHeaders is ":status: 200" and "content-type: application/grpc".
var responseHeaders = appendLiteralIndexed([]byte{0x88}, 31, "application/grpc")

// status415 answers a request that is not gRPC: ":status: 415", a
// literal of the static table's name ":status" (index 8).
var status415 = appendLiteralIndexed(nil, 8, "415")

var grpcStatusOK = appendLiteral(nil, "grpc-status", "0")

var gzipEncoding = appendLiteral(nil, "grpc-encoding", "gzip")

// appendInt is RFC 7541 5.1's integer of an n-bit prefix, the prefix's
// other bits first set.
func appendInt(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	for v -= max; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f)|0x80)
	}
	return append(b, byte(v))
}

func appendString(b []byte, s string) []byte {
	return append(appendInt(b, 0, 7, uint64(len(s))), s...)
}

// appendLiteral is a header field without indexing, of a new name.
func appendLiteral(b []byte, name, value string) []byte {
	return appendString(appendString(append(b, 0), name), value)
}

// appendLiteralIndexed is a header field without indexing, of the static
// table's name at index.
func appendLiteralIndexed(b []byte, index uint64, value string) []byte {
	return appendString(appendInt(b, 0, 4, index), value)
}

// appendMD appends md's fields, binary ones base64-encoded.
func appendMD(b []byte, md metadata.MD) []byte {
	for k, vs := range md {
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			b = appendLiteral(b, k, v)
		}
	}
	return b
}

// appendStatus appends err's grpc-status, grpc-message and
// grpc-status-details-bin; OK for nil.
func appendStatus(b []byte, err error) []byte {
	if err == nil {
		return append(b, grpcStatusOK...)
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	b = appendLiteral(b, "grpc-status", strconv.Itoa(int(st.Code())))
	if msg := st.Message(); msg != "" {
		b = appendLiteral(b, "grpc-message", encodeMessage(msg))
	}
	if p := st.Proto(); len(p.Details) > 0 {
		if bin, err := proto.Marshal(p); err == nil {
			b = appendLiteral(b, "grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(bin))
		}
	}
	return b
}

// encodeMessage percent-encodes what gRPC's grpc-message may not carry
// as it is: bytes outside printable ASCII, and '%'.
func encodeMessage(msg string) string {
	var sb strings.Builder
	for i := 0; i < len(msg); i++ {
		ch := msg[i]
		if ch >= 0x20 && ch <= 0x7e && ch != '%' {
			sb.WriteByte(ch)
			continue
		}
		sb.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(ch)|0x100, 16)[1:]))
	}
	return sb.String()
}

func appendFrameHeader(b []byte, n int, typ http2.FrameType, flags http2.Flags, sid uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), byte(typ), byte(flags), byte(sid>>24), byte(sid>>16), byte(sid>>8), byte(sid))
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	return append(b, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendWindowUpdate(b []byte, sid, n uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, sid)
	return append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendRSTStream(b []byte, sid uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, sid)
	return append(b, byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode, debug ...string) []byte {
	var d string
	if len(debug) > 0 {
		d = debug[0]
	}
	b = appendFrameHeader(b, 8+len(d), http2.FrameGoAway, 0, 0)
	b = append(b, byte(last>>24), byte(last>>16), byte(last>>8), byte(last), byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
	return append(b, d...)
}

// appendHeaders appends block as a HEADERS frame and, past the client's
// frame size, CONTINUATIONs.
func appendHeaders(b []byte, sid uint32, block []byte, end bool, maxFrame int) []byte {
	typ, flags := http2.FrameHeaders, http2.Flags(0)
	if end {
		flags = http2.FlagHeadersEndStream
	}
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders // the same bit for CONTINUATION
		}
		b = appendFrameHeader(b, n, typ, f, sid)
		b = append(b, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		typ, flags = http2.FrameContinuation, 0
	}
}

// writeHeaders writes a call's response headers, once. c.mu is held.
func (c *conn) writeHeaders(st *stream) {
	if st.headerSent || st.done || c.closed {
		return
	}
	st.headerSent = true
	h := append(c.hbuf[:0], responseHeaders...)
	if st.gzip {
		h = append(h, gzipEncoding...)
	}
	h = appendMD(h, st.header)
	c.wbuf = appendHeaders(c.wbuf, st.id, h, false, c.peerFrame)
	c.hbuf = h
	c.answered = true
	c.kick()
}

// writeData writes p as DATA frames of a call, as the windows allow,
// waiting for them to open. It reports false when the call or the
// connection ended first. c.mu is held.
func (c *conn) writeData(st *stream, p []byte) bool {
	for len(p) > 0 {
		if st.done || c.closed {
			return false
		}
		n := min(int64(len(p)), int64(c.peerFrame), c.sendWin, st.sendWin)
		if n <= 0 {
			c.cond.Wait()
			continue
		}
		c.wbuf = appendFrameHeader(c.wbuf, int(n), http2.FrameData, 0, st.id)
		c.wbuf = append(c.wbuf, p[:n]...)
		c.sendWin -= n
		st.sendWin -= n
		c.answered = true
		p = p[n:]
		c.kick()
	}
	return true
}

// writeTrailers ends a call with err's status (OK for nil): a
// Trailers-Only answer when no headers were sent. c.mu is held.
func (c *conn) writeTrailers(st *stream, err error) {
	if st.done || c.closed {
		return
	}
	h := c.hbuf[:0]
	if !st.headerSent {
		h = append(h, responseHeaders...)
		st.headerSent = true
	}
	h = appendStatus(h, err)
	h = appendMD(h, st.trailer)
	c.wbuf = appendHeaders(c.wbuf, st.id, h, true, c.peerFrame)
	c.hbuf = h
	st.done = true
	c.answered = true
	c.kick()
}

var (
	gzipReaders sync.Pool
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
)

// gunzip decompresses a message, refusing one that decompresses past
// maxMessage.
func gunzip(b []byte) ([]byte, error) {
	var zr *gzip.Reader
	if v := gzipReaders.Get(); v != nil {
		zr = v.(*gzip.Reader)
		if err := zr.Reset(bytes.NewReader(b)); err != nil {
			return nil, errCompression
		}
	} else {
		var err error
		if zr, err = gzip.NewReader(bytes.NewReader(b)); err != nil {
			return nil, errCompression
		}
	}
	defer gzipReaders.Put(zr)
	out, err := io.ReadAll(io.LimitReader(zr, maxMessage+1))
	switch {
	case err != nil:
		return nil, errCompression
	case len(out) > maxMessage:
		return nil, errTooLarge
	}
	return out, nil
}

// gzipped compresses a message.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&out)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
