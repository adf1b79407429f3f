// Package h2sniff splits one listener in two by the first bytes of each
// connection: those that open with HTTP/2's client preface (prior
// knowledge, as gRPC and Connect's gRPC protocol speak it without TLS) and
// all others, so two HTTP servers can share one port.
package h2sniff

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"time"
)

// preface is what an HTTP/2 client sends first (RFC 9113, section 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Split accepts ln's connections and hands each to h2 when it opens with
// the HTTP/2 preface, else to rest. A connection that has sent neither the
// preface nor a byte that rules it out within timeout is closed. Closing
// both listeners closes ln; connections still being sniffed for a closed
// listener are closed.
func Split(ln net.Listener, timeout time.Duration) (h2, rest *Listener) {
	s := &splitter{base: ln, timeout: timeout}
	s.h2 = newSub(s)
	s.rest = newSub(s)
	go s.accept()
	return s.h2, s.rest
}

type splitter struct {
	base    net.Listener
	timeout time.Duration
	h2      *Listener
	rest    *Listener

	mu     sync.Mutex
	closed int // sub-listeners closed
}

func (s *splitter) accept() {
	var backoff time.Duration
	for {
		c, err := s.base.Accept()
		if errors.Is(err, net.ErrClosed) {
			s.h2.fail(err)
			s.rest.fail(err)
			return
		}
		if err != nil { // out of file descriptors and the like: wait, as net/http does
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go s.sniff(c)
	}
}

// sniff reads until the preface is matched or ruled out, then passes c on
// with what was read put back in front of its stream.
func (s *splitter) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	var buf [len(preface)]byte
	n := 0
	for n < len(buf) && bytes.Equal(buf[:n], []byte(preface[:n])) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil && (n == 0 || bytes.Equal(buf[:n], []byte(preface[:n]))) {
			c.Close() // gone, or silent, before saying what it speaks
			return
		}
		if err != nil {
			break // its first bytes are said: let the server answer them
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	to := s.rest
	if n == len(buf) && string(buf[:]) == preface {
		to = s.h2
	}
	to.Hand(Unread(c, append([]byte(nil), buf[:n]...)))
}

// closedOne closes the base listener once both sub-listeners are closed.
func (s *splitter) closedOne() {
	s.mu.Lock()
	s.closed++
	last := s.closed == 2
	s.mu.Unlock()
	if last {
		_ = s.base.Close()
	}
}

// Listener is one side of the split.
type Listener struct {
	s      *splitter
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	errMu  sync.Mutex
	err    error // the base listener's, once it failed
	failed chan struct{}
	fonce  sync.Once
}

func newSub(s *splitter) *Listener {
	return &Listener{s: s, conns: make(chan net.Conn), done: make(chan struct{}), failed: make(chan struct{})}
}

// Hand gives c to this side's Accept as the splitter does, and waits
// until it is taken; c is closed instead when this side is closed. A
// server that has read a connection's first request can hand it over this
// way, the request put back in front with Unread.
func (l *Listener) Hand(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *Listener) fail(err error) {
	l.fonce.Do(func() {
		l.errMu.Lock()
		l.err = err
		l.errMu.Unlock()
		close(l.failed)
	})
}

// Accept waits for the next connection of this side.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.failed:
		l.errMu.Lock()
		defer l.errMu.Unlock()
		return nil, l.err
	}
}

// Close stops this side; connections meant for it are closed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.s.closedOne()
	})
	return nil
}

// Addr is the shared listener's address.
func (l *Listener) Addr() net.Addr { return l.s.base.Addr() }

// Unread returns c with head put back in front of what it reads.
func Unread(c net.Conn, head []byte) net.Conn { return &prefixed{Conn: c, head: head} }

// prefixed is a connection whose first bytes were read already and are
// given back first.
type prefixed struct {
	net.Conn
	head []byte
}

func (c *prefixed) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
