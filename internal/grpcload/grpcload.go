// Package grpcload is a lean load generator for unary gRPC methods: raw
// HTTP/2 frames (golang.org/x/net/http2's Framer) over a few connections
// with many streams each, one goroutine per connection and one write per
// batch of frames. A benchmark's generator shares the machine with the
// server it measures; grpc-go's client spends about as much CPU per call
// as the server, this one a fraction of it, and unlike h2load (one fixed
// body) it cycles through a set of request bodies, so a benchmark can
// spread its calls over many client ids.
//
// It speaks only what a unary call needs (no TLS, no compression, request
// messages up to 16 KiB, so each goes in one DATA frame); it waits for the
// server's settings and honours them (concurrent streams, windows), answers
// pings and keeps its own receive window open.
package grpcload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sync/errgroup"
)

// Config is one load: Conns connections, Streams calls in flight on each,
// until Duration has passed or Calls calls have been started.
type Config struct {
	Addr     string   // host:port, unencrypted HTTP/2 (h2c, prior knowledge)
	Method   string   // the full method, "/package.Service/Method"
	Messages [][]byte // serialized request messages, sent in turn
	Metadata []string // pairs of header name and value sent with each call, e.g. "authorization", "Bearer …"
	Conns    int      // default 2
	Streams  int      // calls in flight per connection, default 25
	Duration time.Duration
	Calls    int64 // when > 0, stop after this many calls in all
	// Classify, when set, is called with each successful call's response
	// message; the calls it returns true for are counted in Result.Matched.
	Classify func(msg []byte) bool `json:"-"`
}

// Result is what a load measured.
type Result struct {
	Calls     int64           // calls answered, successfully or not
	Failed    int64           // answered with a gRPC status other than OK, or reset
	Matched   int64           // successful calls Classify returned true for
	FirstErr  string          // the first failure, for the report
	Latencies []time.Duration // of every answered call, sorted
	Elapsed   time.Duration
}

// Percentile is the latency below which p (0..1) of the calls were
// answered.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[min(len(r.Latencies)-1, int(float64(len(r.Latencies))*p))]
}

// Run loads cfg.Addr and returns what it measured. It fails when a
// connection fails; calls the server answers with an error are counted,
// not fatal.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.Messages) == 0 || cfg.Method == "" || len(cfg.Metadata)%2 != 0 {
		return Result{}, errors.New("grpcload: Method and Messages are required, Metadata in pairs")
	}
	for _, m := range cfg.Messages {
		if len(m) > maxMessage {
			return Result{}, fmt.Errorf("grpcload: a message of %d bytes: at most %d", len(m), maxMessage)
		}
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 2
	}
	if cfg.Streams <= 0 {
		cfg.Streams = 25
	}
	// Each message framed once: a gRPC message is a flag byte (not
	// compressed) and a big-endian length ahead of the bytes.
	frames := make([][]byte, len(cfg.Messages))
	for i, m := range cfg.Messages {
		frames[i] = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(m)))
		frames[i] = append(frames[i], m...)
	}
	var until time.Time
	if cfg.Duration > 0 {
		until = time.Now().Add(cfg.Duration)
	}
	conns := make([]*conn, cfg.Conns)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for i := range conns {
		// Each connection starts its share of Calls (the first one the
		// remainder too) and its own part of the messages.
		limit := int64(-1)
		if cfg.Calls > 0 {
			limit = cfg.Calls / int64(cfg.Conns)
			if i == 0 {
				limit += cfg.Calls % int64(cfg.Conns)
			}
		}
		c := &conn{cfg: &cfg, frames: frames, next: i * len(frames) / cfg.Conns, until: until, limit: limit}
		conns[i] = c
		g.Go(func() error { return c.run(gctx) })
	}
	err := g.Wait()
	res := Result{Elapsed: time.Since(start)}
	for _, c := range conns {
		res.Calls += c.calls
		res.Failed += c.failed
		res.Matched += c.matched
		res.Latencies = append(res.Latencies, c.lats...)
		if res.FirstErr == "" {
			res.FirstErr = c.firstErr
		}
	}
	slices.Sort(res.Latencies)
	return res, err
}

// call is one call in flight.
type call struct {
	start time.Time
	ok    bool   // grpc-status 0 came
	err   string // why the call failed, once known
	msg   []byte // the response message, when classified
	got   bool   // a response message arrived
}

// conn is one HTTP/2 connection and the calls in flight on it, served by
// one goroutine.
type conn struct {
	cfg    *Config
	frames [][]byte
	next   int       // the index of the next message
	until  time.Time // no call starts after it, unless zero
	limit  int64     // calls left to start, -1 for no limit

	fr     *http2.Framer
	bw     *bufio.Writer
	br     *bufio.Reader
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32
	flight map[uint32]*call
	free   []*call

	sendWindow   int64 // the connection's send window
	streamWindow int64 // the peer's initial stream window
	recvUnacked  int64 // response bytes not yet returned to the peer's window
	queued       int   // calls that wait for the server's settings, a stream or send window
	settled      bool  // the server's first SETTINGS came: no call starts before
	maxStreams   int   // the server's SETTINGS_MAX_CONCURRENT_STREAMS

	calls, failed, matched int64
	firstErr               string
	lats                   []time.Duration
}

// maxMessage is the largest request message: one that fits a DATA frame
// of HTTP/2's smallest maximum frame size (16 KiB) with its gRPC prefix,
// and so every stream's initial window too.
const maxMessage = 16<<10 - 5

// recvWindow is the receive window this client gives every stream and the
// connection; the connection's is topped up after each recvWindow/2 bytes.
const recvWindow = 1 << 24

func (c *conn) run(ctx context.Context) error {
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	c.bw, c.br = bufio.NewWriterSize(nc, 64<<10), bufio.NewReaderSize(nc, 64<<10)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.nextID, c.flight = 1, make(map[uint32]*call, c.cfg.Streams)
	c.sendWindow, c.streamWindow, c.maxStreams = 65535, 65535, math.MaxInt
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow}); err != nil {
		return err
	}
	if err := c.fr.WriteWindowUpdate(0, recvWindow); err != nil {
		return err
	}
	for range c.cfg.Streams {
		if err := c.start(); err != nil {
			return err
		}
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for len(c.flight) > 0 || c.queued > 0 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("grpcload: %d calls in flight: %w", len(c.flight), err)
		}
		if err := c.handle(f); err != nil {
			return err
		}
		// One write for everything the frames read so far asked for.
		if c.br.Buffered() == 0 {
			if err := c.bw.Flush(); err != nil {
				return err
			}
		}
	}
	return c.bw.Flush()
}

// more says whether another call may start on this connection.
func (c *conn) more() bool {
	if c.limit == 0 || (!c.until.IsZero() && time.Now().After(c.until)) {
		return false
	}
	if c.limit > 0 {
		c.limit--
	}
	return true
}

// start begins the next call, or queues it until the server's settings
// have come, while the server allows no more streams, or while the
// connection's send window is too small for its message.
func (c *conn) start() error {
	if c.more() {
		c.queued++
	}
	return c.sendQueued() // the queued ones, if this one may not start
}

// sendQueued sends the queued calls the server's limits have room for.
func (c *conn) sendQueued() error {
	for c.queued > 0 && c.settled && len(c.flight) < c.maxStreams {
		body := c.frames[c.next%len(c.frames)]
		if int64(len(body)) > c.sendWindow || int64(len(body)) > c.streamWindow {
			return nil
		}
		c.queued--
		c.next++
		id := c.nextID
		c.nextID += 2
		c.hbuf.Reset()
		for _, hf := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", c.cfg.Method}, {":authority", c.cfg.Addr},
			{"content-type", "application/grpc"}, {"te", "trailers"}} {
			_ = c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		for i := 0; i < len(c.cfg.Metadata); i += 2 {
			_ = c.enc.WriteField(hpack.HeaderField{Name: c.cfg.Metadata[i], Value: c.cfg.Metadata[i+1], Sensitive: true})
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		if err := c.fr.WriteData(id, true, body); err != nil {
			return err
		}
		c.sendWindow -= int64(len(body))
		var cl *call
		if n := len(c.free); n > 0 {
			cl, c.free = c.free[n-1], c.free[:n-1]
			*cl = call{msg: cl.msg[:0]}
		} else {
			cl = &call{}
		}
		cl.start = time.Now()
		c.flight[id] = cl
	}
	return nil
}

// handle is one frame from the server.
func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		cl := c.flight[f.StreamID]
		if cl == nil {
			return nil
		}
		if s := f.PseudoValue("status"); s != "" && s != "200" && cl.err == "" {
			cl.err = "HTTP status " + s
		}
		if v := field(f, "grpc-status"); v != "" && cl.err == "" {
			cl.ok = v == "0"
			if !cl.ok {
				cl.err = "grpc-status " + v + ": " + field(f, "grpc-message")
			}
		}
		if f.StreamEnded() {
			return c.finish(f.StreamID, cl)
		}
	case *http2.DataFrame:
		c.recvUnacked += int64(f.Length)
		if c.recvUnacked >= recvWindow/2 {
			if err := c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked)); err != nil {
				return err
			}
			c.recvUnacked = 0
		}
		cl := c.flight[f.StreamID]
		if cl == nil {
			return nil
		}
		cl.got = cl.got || len(f.Data()) > 0
		if c.cfg.Classify != nil {
			cl.msg = append(cl.msg, f.Data()...)
		}
		if f.StreamEnded() {
			return c.finish(f.StreamID, cl)
		}
	case *http2.RSTStreamFrame:
		if cl := c.flight[f.StreamID]; cl != nil {
			cl.err = "stream reset: " + f.ErrCode.String()
			return c.finish(f.StreamID, cl)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			c.streamWindow = int64(v)
		}
		if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
			c.maxStreams = int(v)
		}
		c.settled = true
		if err := c.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return c.sendQueued()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
			return c.sendQueued()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		return fmt.Errorf("grpcload: the server went away: %v %s", f.ErrCode, f.DebugData())
	}
	return nil
}

// finish counts an ended call and starts the next.
func (c *conn) finish(id uint32, cl *call) error {
	delete(c.flight, id)
	c.lats = append(c.lats, time.Since(cl.start))
	c.calls++
	switch {
	case !cl.ok && cl.err == "":
		c.fail("no grpc-status")
	case !cl.ok:
		c.fail(cl.err)
	case !cl.got:
		c.fail("no response message")
	case c.cfg.Classify != nil:
		if len(cl.msg) >= 5 && c.cfg.Classify(cl.msg[5:]) {
			c.matched++
		}
	}
	c.free = append(c.free, cl)
	return c.start()
}

func (c *conn) fail(why string) {
	c.failed++
	if c.firstErr == "" {
		c.firstErr = why
	}
}

// field is the value of a header block's regular field name, "" if none.
func field(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}
