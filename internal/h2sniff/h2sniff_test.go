package h2sniff

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func listen(t *testing.T, timeout time.Duration) (net.Listener, net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h2, rest := Split(ln, timeout)
	t.Cleanup(func() { h2.Close(); rest.Close() })
	return h2, rest, ln.Addr().String()
}

// send dials addr, writes msg and half-closes, so the accepting side can
// read everything up to EOF.
func send(t *testing.T, addr, msg string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
}

// accepted is the next connection of ln and everything it carried.
func accepted(t *testing.T, ln net.Listener) string {
	t.Helper()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConnectionsGoWhereTheirFirstBytesSay(t *testing.T) {
	t.Parallel()
	h2, rest, addr := listen(t, 5*time.Second)
	grpc := preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" // the preface, then a SETTINGS frame
	http1 := "POST /v1/check HTTP/1.1\r\nHost: x\r\n\r\n"
	send(t, addr, grpc)
	if got := accepted(t, h2); got != grpc {
		t.Fatalf("HTTP/2 side read %q, want %q", got, grpc)
	}
	send(t, addr, http1)
	if got := accepted(t, rest); got != http1 {
		t.Fatalf("other side read %q, want %q", got, http1)
	}
	// "PRI " followed by anything but the rest of the preface is not HTTP/2.
	odd := "PRI * HTTP/1.1\r\n\r\n"
	send(t, addr, odd)
	if got := accepted(t, rest); got != odd {
		t.Fatalf("other side read %q, want %q", got, odd)
	}
	// A short request that ends before ruling HTTP/2 out still goes on: the
	// server answers what it said.
	send(t, addr, "G")
	if got := accepted(t, rest); got != "G" {
		t.Fatalf("other side read %q, want %q", got, "G")
	}
}

// A client that sends part of the preface and stalls is closed at the
// timeout, and holds no one up meanwhile.
func TestSilentClientsAreClosedWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	_, rest, addr := listen(t, 300*time.Millisecond)
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := io.WriteString(stalled, "PR"); err != nil {
		t.Fatal(err)
	}
	send(t, addr, "GET / HTTP/1.1\r\n\r\n")
	if got := accepted(t, rest); got != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q", got)
	}
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the stalled client read %v, want EOF (closed by the splitter)", err)
	}
	// Cut off in the middle of the preface: closed, never delivered (a
	// delivered one would wait for an Accept, open).
	cut, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	_, _ = io.WriteString(cut, preface[:10])
	_ = cut.(*net.TCPConn).CloseWrite()
	_ = cut.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cut.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a client cut off in the preface read %v, want EOF (closed by the splitter)", err)
	}
}

func TestClosingBothSidesClosesTheListener(t *testing.T) {
	t.Parallel()
	h2, rest, addr := listen(t, time.Second)
	h2.Close()
	if _, err := h2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed side: %v", err)
	}
	// One side open: the port still takes connections for it.
	send(t, addr, "GET / HTTP/1.1\r\n\r\n")
	if got := accepted(t, rest); got != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q", got)
	}
	// A connection for the closed side is closed.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, preface)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection for the closed side read %v, want EOF", err)
	}
	c.Close()
	rest.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after both sides closed")
	}
}
