package h2sniff

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeListener accepts the server ends of in-memory pipes.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { close(l.done); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// signalConn tells when it is closed.
type signalConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *signalConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// FuzzSplit sends arbitrary first bytes and then closes: a connection that
// opens with the whole preface goes to the HTTP/2 side, one that rules it
// out goes to the other, one that ends inside the preface (or says
// nothing) is closed undelivered; whichever side takes it reads every byte
// sent.
func FuzzSplit(f *testing.F) {
	for _, seed := range []string{preface, preface + "\x00\x00\x00\x04", "GET / HTTP/1.1\r\n\r\n", "P", "PRI * HTTP/2.0",
		"", "PRI * HTTP/1.1\r\n\r\n", "\x16\x03\x01"} {
		f.Add([]byte(seed))
	}
	base := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	h2, rest := Split(base, 5*time.Second)
	defer h2.Close()
	defer rest.Close()
	toH2, toRest := make(chan net.Conn, 1), make(chan net.Conn, 1)
	for l, ch := range map[*Listener]chan net.Conn{h2: toH2, rest: toRest} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				ch <- c
			}
		}()
	}
	f.Fuzz(func(t *testing.T, sent []byte) {
		client, server := net.Pipe()
		defer client.Close()
		sc := &signalConn{Conn: server, closed: make(chan struct{})}
		base.conns <- sc
		go func() {
			_, _ = client.Write(sent)
			_ = client.Close()
		}()
		want := "closed"
		switch {
		case bytes.HasPrefix(sent, []byte(preface)):
			want = "h2"
		case !strings.HasPrefix(preface, string(sent)):
			want = "rest"
		}
		var got net.Conn
		side := "closed"
		select {
		case got = <-toH2:
			side = "h2"
		case got = <-toRest:
			side = "rest"
		case <-sc.closed:
		}
		if side != want {
			t.Fatalf("%q went to %s, want %s", sent, side, want)
		}
		if got == nil {
			return
		}
		defer got.Close()
		read, err := io.ReadAll(got)
		if err != nil || !bytes.Equal(read, sent) {
			t.Fatalf("the %s side read %q (%v), want %q", side, read, err, sent)
		}
	})
}
