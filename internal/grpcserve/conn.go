package grpcserve

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"
)

// HTTP/2 as this server speaks it (RFC 9113).
const (
	frameHeaderLen = 9
	maxFrameSize   = 16384    // the largest frame a client may send: HTTP/2's default
	maxHeaderBlock = 64 << 10 // a request's header block, CONTINUATIONs included
	defaultWindow  = 65535
	// connWindow is the connection's receive window, raised from the
	// default at the start; streamWindow, each stream's (SETTINGS).
	connWindow   = 1 << 20
	streamWindow = 1 << 16
	// maxBuffered bounds the request bytes one connection holds for calls
	// not yet answered: past it the connection's window is not reopened
	// until calls end.
	maxBuffered  = 4 << 20
	ackThreshold = 32 << 10 // bytes consumed before a WINDOW_UPDATE is sent
	prefaceWait  = 10 * time.Second
	writeTimeout = time.Minute
)

// conn is one client connection. Its reader goroutine (serve) reads and
// handles every frame; its writer goroutine writes what calls append to
// wbuf. mu guards everything below it.
type conn struct {
	s   *Server
	nc  net.Conn
	br  *bufio.Reader
	ctx context.Context

	rbuf   [frameHeaderLen + maxFrameSize]byte
	dec    *hpack.Decoder
	fields []hpack.HeaderField // the header block being decoded
	// The last header block, when it left the decoder as it found it
	// (decodeBlock). The reader's own.
	lastBlock []byte
	blockKept bool
	// The last call's metadata and the fields it came from, for the next
	// call of the same metadata to share (metadataOf). The reader's own.
	lastMD     metadata.MD
	lastCtx    context.Context // ctx with lastMD, incoming
	lastFields []hpack.HeaderField
	hblock     []byte // a header block awaiting its CONTINUATIONs
	hsid       uint32 // its stream
	hend       bool   // its END_STREAM
	lastID     uint32 // the last stream a client opened

	wake chan struct{} // the writer has something to write
	done chan struct{} // closed when the connection ends

	mu        sync.Mutex
	cond      *sync.Cond // a window opened, data arrived, a stream or the connection ended
	streams   map[uint32]*stream
	wbuf      []byte
	hbuf      []byte // a header block being encoded
	kicked    bool
	closed    bool
	draining  bool // GOAWAY sent: no new streams
	flushExit bool // the writer closes the connection once wbuf is written
	sendWin   int64
	peerWin   int64 // the client's initial stream window
	peerFrame int   // the largest frame the client takes
	recvAcked int   // bytes consumed, not yet given back to the connection's window
	buffered  int   // request bytes held by calls
	answered  bool  // headers or data sent since the last PING
	pings     int   // PINGs too soon after the last
	pingAt    time.Time
	closeOnce sync.Once
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{}), streams: map[uint32]*stream{},
		sendWin: defaultWindow, peerWin: defaultWindow, peerFrame: maxFrameSize}
	c.cond = sync.NewCond(&c.mu)
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(maxHeaderBlock)
	return c
}

func (c *conn) onField(f hpack.HeaderField) { c.fields = append(c.fields, f) }

// errProtocol ends a connection whose client broke HTTP/2.
var errProtocol = errors.New("grpcserve: HTTP/2 protocol error")

// serve runs the connection until it ends.
func (c *conn) serve() {
	defer c.s.forget(c)
	defer c.shutdown()
	if c.s.tls != nil {
		tc := tls.Server(c.nc, c.s.tls)
		_ = tc.SetDeadline(time.Now().Add(prefaceWait))
		if err := tc.Handshake(); err != nil {
			return
		}
		c.nc = tc
	}
	c.ctx = connContext(c.nc)
	c.br = bufio.NewReaderSize(c.nc, 16<<10)
	_ = c.nc.SetReadDeadline(time.Now().Add(prefaceWait))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	b := appendFrameHeader(c.wbuf, 3*6, http2.FrameSettings, 0, 0)
	b = appendSetting(b, http2.SettingMaxConcurrentStreams, MaxStreams)
	b = appendSetting(b, http2.SettingInitialWindowSize, streamWindow)
	b = appendSetting(b, http2.SettingMaxHeaderListSize, maxHeaderBlock)
	c.wbuf = appendWindowUpdate(b, 0, connWindow-defaultWindow)
	c.kick()
	c.mu.Unlock()
	go c.writer()
	if c.s.maxAge > 0 {
		age := time.Duration(float64(c.s.maxAge) * (0.9 + 0.2*rand.Float64()))
		t := time.AfterFunc(age, func() {
			c.goAway()
			time.AfterFunc(c.s.maxAgeGrace, c.shutdown)
		})
		defer t.Stop()
	}
	for {
		if err := c.readFrame(); err != nil {
			if errors.Is(err, errProtocol) {
				c.mu.Lock()
				c.wbuf = appendGoAway(c.wbuf, c.lastID, http2.ErrCodeProtocol)
				c.flushExit = true
				c.kick()
				c.mu.Unlock()
				select {
				case <-c.done:
				case <-time.After(time.Second):
				}
			}
			return
		}
	}
}

// readFrame reads one frame and handles it.
func (c *conn) readFrame() error {
	h := c.rbuf[:frameHeaderLen]
	if _, err := io.ReadFull(c.br, h); err != nil {
		return err
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	typ, flags, sid := http2.FrameType(h[3]), http2.Flags(h[4]), binary.BigEndian.Uint32(h[5:])&(1<<31-1)
	if n > maxFrameSize {
		return errProtocol
	}
	p := c.rbuf[frameHeaderLen : frameHeaderLen+n]
	if _, err := io.ReadFull(c.br, p); err != nil {
		return err
	}
	if c.hblock != nil && typ != http2.FrameContinuation {
		return errProtocol // a header block is cut by another frame
	}
	switch typ {
	case http2.FrameData:
		return c.onData(flags, sid, p)
	case http2.FrameHeaders:
		return c.onHeaders(flags, sid, p)
	case http2.FrameContinuation:
		if c.hblock == nil || sid != c.hsid {
			return errProtocol
		}
		if len(c.hblock)+len(p) > maxHeaderBlock {
			return errProtocol
		}
		c.hblock = append(c.hblock, p...)
		if flags.Has(http2.FlagContinuationEndHeaders) {
			block := c.hblock
			c.hblock = nil
			return c.onHeaderBlock(c.hsid, block, c.hend)
		}
		return nil
	case http2.FrameSettings:
		return c.onSettings(flags, sid, p)
	case http2.FramePing:
		return c.onPing(flags, sid, p)
	case http2.FrameWindowUpdate:
		return c.onWindowUpdate(sid, p)
	case http2.FrameRSTStream:
		if sid == 0 || len(p) != 4 {
			return errProtocol
		}
		c.mu.Lock()
		if st := c.streams[sid]; st != nil {
			c.endStream(st)
		}
		c.mu.Unlock()
		return nil
	case http2.FramePushPromise:
		return errProtocol
	default: // PRIORITY, GOAWAY, extensions: nothing to do
		return nil
	}
}

// padded strips a frame's padding.
func padded(flags http2.Flags, p []byte) ([]byte, error) {
	if !flags.Has(http2.FlagDataPadded) { // the same bit for HEADERS
		return p, nil
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, errProtocol
	}
	return p[1 : len(p)-int(p[0])], nil
}

func (c *conn) onHeaders(flags http2.Flags, sid uint32, p []byte) error {
	if sid == 0 {
		return errProtocol
	}
	p, err := padded(flags, p)
	if err != nil {
		return err
	}
	if flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return errProtocol
		}
		p = p[5:]
	}
	end := flags.Has(http2.FlagHeadersEndStream)
	if !flags.Has(http2.FlagHeadersEndHeaders) {
		c.hblock, c.hsid, c.hend = append(make([]byte, 0, 2*len(p)), p...), sid, end
		return nil
	}
	return c.onHeaderBlock(sid, p, end)
}

// onHeaderBlock decodes a whole header block: a new call, or a call's
// trailers.
func (c *conn) onHeaderBlock(sid uint32, block []byte, end bool) error {
	if err := c.decodeBlock(block); err != nil {
		return err
	}
	if sid <= c.lastID { // trailers of a call, or of one already answered
		c.mu.Lock()
		if st := c.streams[sid]; st != nil && !st.ended {
			if !end {
				c.mu.Unlock()
				return errProtocol
			}
			c.endOfRequest(st)
		}
		c.mu.Unlock()
		return nil
	}
	if sid%2 == 0 {
		return errProtocol
	}
	c.lastID = sid
	c.open(sid, end)
	return nil
}

func (c *conn) onData(flags http2.Flags, sid uint32, p []byte) error {
	if sid == 0 {
		return errProtocol
	}
	size := len(p)
	p, err := padded(flags, p)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recvAcked += size
	st := c.streams[sid]
	if st == nil || st.ended || st.done {
		c.ackConn() // a call answered or reset: its data is dropped
		return nil
	}
	if len(st.buf)+len(p) > maxMessage+5 { // unread: one message, and its prefix
		c.ackConn()
		c.refuse(st, errTooLarge)
		return nil
	}
	st.buf = append(st.buf, p...)
	st.held += len(p)
	c.buffered += len(p)
	st.unacked += size
	if st.unacked >= ackThreshold {
		c.wbuf = appendWindowUpdate(c.wbuf, sid, uint32(st.unacked))
		st.unacked = 0
		c.kick()
	}
	c.ackConn()
	if flags.Has(http2.FlagDataEndStream) {
		c.endOfRequest(st)
	} else if st.m.stream != nil {
		c.cond.Broadcast()
	}
	return nil
}

// ackConn gives what has been consumed back to the connection's window,
// unless calls hold too many request bytes. c.mu is held.
func (c *conn) ackConn() {
	if c.recvAcked >= ackThreshold && c.buffered < maxBuffered {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.recvAcked))
		c.recvAcked = 0
		c.kick()
	}
}

// endOfRequest marks the end of a call's request: a unary call runs now.
// c.mu is held.
func (c *conn) endOfRequest(st *stream) {
	st.ended = true
	if st.m.stream == nil {
		c.s.dispatch(st)
		return
	}
	c.cond.Broadcast()
}

func (c *conn) onSettings(flags http2.Flags, sid uint32, p []byte) error {
	if sid != 0 || len(p)%6 != 0 {
		return errProtocol
	}
	if flags.Has(http2.FlagSettingsAck) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; len(p) > 0; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch http2.SettingID(binary.BigEndian.Uint16(p)) {
		case http2.SettingInitialWindowSize:
			if v > 1<<31-1 {
				return errProtocol
			}
			delta := int64(v) - c.peerWin
			c.peerWin = int64(v)
			for _, st := range c.streams {
				st.sendWin += delta
			}
			c.cond.Broadcast()
		case http2.SettingMaxFrameSize:
			if v < 1<<14 || v > 1<<24-1 {
				return errProtocol
			}
			c.peerFrame = int(v)
		}
	}
	c.wbuf = appendFrameHeader(c.wbuf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	c.kick()
	return nil
}

func (c *conn) onPing(flags http2.Flags, sid uint32, p []byte) error {
	if sid != 0 || len(p) != 8 {
		return errProtocol
	}
	if flags.Has(http2.FlagPingAck) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// As grpc-go's servers: a PING after the server sent data or headers
	// is never a strike (grpc-go's clients ping to measure bandwidth as
	// they receive answers); others too soon after the last are.
	if c.answered {
		c.answered, c.pings = false, 0
	} else {
		now := time.Now()
		if !c.pingAt.IsZero() && now.Sub(c.pingAt) < c.s.pingMinTime {
			c.pings++
		}
		c.pingAt = now
	}
	if c.pings > 2 {
		c.wbuf = appendGoAway(c.wbuf, c.lastID, http2.ErrCodeEnhanceYourCalm, "too_many_pings")
		c.flushExit = true
		c.draining = true
		c.kick()
		return nil
	}
	c.wbuf = appendFrameHeader(c.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
	c.wbuf = append(c.wbuf, p...)
	c.kick()
	return nil
}

func (c *conn) onWindowUpdate(sid uint32, p []byte) error {
	if len(p) != 4 {
		return errProtocol
	}
	n := int64(binary.BigEndian.Uint32(p) & (1<<31 - 1))
	c.mu.Lock()
	defer c.mu.Unlock()
	if sid == 0 {
		c.sendWin += n
	} else if st := c.streams[sid]; st != nil {
		st.sendWin += n
	}
	c.cond.Broadcast()
	return nil
}

// kick wakes the writer. c.mu is held.
func (c *conn) kick() {
	if !c.kicked {
		c.kicked = true
		c.wake <- struct{}{}
	}
}

// writer writes what the calls append to wbuf, a batch per write.
func (c *conn) writer() {
	var out []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		// Let the calls a Redis answer woke append their frames first:
		// one write then carries many answers.
		runtime.Gosched()
		c.mu.Lock()
		out, c.wbuf = c.wbuf, out[:0]
		c.kicked = false
		exit := c.flushExit && len(c.streams) == 0
		c.mu.Unlock()
		if len(out) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := c.nc.Write(out); err != nil {
				c.shutdown()
				return
			}
		}
		if exit {
			c.shutdown()
			return
		}
		if cap(out) > 1<<20 {
			out = nil // a burst's buffer is not kept
		}
	}
}

// goAway sends the client away: no new calls; the connection closes once
// the calls in flight are answered.
func (c *conn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closed {
		return
	}
	c.draining = true
	c.wbuf = appendGoAway(c.wbuf, c.lastID, http2.ErrCodeNo)
	c.flushExit = true
	c.kick()
}

// shutdown closes the connection at once, cancelling its calls.
func (c *conn) shutdown() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		for _, st := range c.streams {
			c.endStream(st)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		c.nc.Close()
		close(c.done)
	})
}
