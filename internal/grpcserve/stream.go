package grpcserve

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// startStream runs a streaming call on a goroutine of its own. c.mu is
// held.
func (c *conn) startStream(st *stream) { go c.runStream(st) }

func (c *conn) runStream(st *stream) {
	ss := &serverStream{st: st, ctx: grpc.NewContextWithServerTransportStream(c.callContext(st), transportStream{st})}
	err := c.callStream(ss)
	if err == nil && errors.Is(ss.ctx.Err(), context.DeadlineExceeded) {
		err = ss.ctx.Err()
	}
	c.mu.Lock()
	c.writeTrailers(st, err)
	c.mu.Unlock()
	c.endContext(st)
	c.release(st)
}

func (c *conn) callStream(ss *serverStream) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.svc.Recovered(ss.ctx, "grpc", r)
			err = errPanic
		}
	}()
	return ss.st.m.stream.Handler(ss.st.m.impl, ss)
}

// serverStream is a streaming call, as its handler sees it.
type serverStream struct {
	st  *stream
	ctx context.Context
}

func (ss *serverStream) Context() context.Context { return ss.ctx }

func (ss *serverStream) SetHeader(md metadata.MD) error {
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if ss.st.headerSent {
		return errors.New("grpcserve: headers already sent")
	}
	ss.st.header = metadata.Join(ss.st.header, md)
	return nil
}

func (ss *serverStream) SendHeader(md metadata.MD) error {
	if err := ss.SetHeader(md); err != nil {
		return err
	}
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHeaders(ss.st)
	return nil
}

func (ss *serverStream) SetTrailer(md metadata.MD) {
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	ss.st.trailer = metadata.Join(ss.st.trailer, md)
}

func (ss *serverStream) SendMsg(m any) error {
	b, err := marshalMessage(nil, m, ss.st.gzip)
	if err != nil {
		return err
	}
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHeaders(ss.st)
	if !c.writeData(ss.st, b) {
		return errCancelled
	}
	return nil
}

func (ss *serverStream) RecvMsg(m any) error {
	st, c := ss.st, ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if st.done {
			return errCancelled
		}
		msg, rest, err := st.message(st.buf)
		if err != nil {
			return err
		}
		if msg != nil {
			err := unmarshal(msg, m)
			used := len(st.buf) - len(rest)
			st.buf = st.buf[:copy(st.buf, rest)]
			st.held -= used
			c.buffered -= used
			c.ackConn()
			return err
		}
		if st.ended {
			if len(st.buf) > 0 {
				return errMalformed
			}
			return io.EOF
		}
		c.cond.Wait()
	}
}

// transportStream is a streaming call as grpc.SetHeader and its kin see
// it.
type transportStream struct{ st *stream }

func (t transportStream) Method() string { return t.st.method }
func (t transportStream) SetHeader(md metadata.MD) error {
	return (&serverStream{st: t.st}).SetHeader(md)
}
func (t transportStream) SendHeader(md metadata.MD) error {
	return (&serverStream{st: t.st}).SendHeader(md)
}
func (t transportStream) SetTrailer(md metadata.MD) error {
	(&serverStream{st: t.st}).SetTrailer(md)
	return nil
}
