package spinconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// pair dials a loopback listener through a spinning Dialer and returns
// both ends.
func pair(t *testing.T, spin time.Duration, when func() bool) (client net.Conn, server net.Conn, s *spinner) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dial := Dialer(&net.Dialer{}, Options{Spin: spin, When: when})
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv, c.(*conn).s
}

// Request and answer, as a client of Redis: every answer arrives whole
// and in order whether a read found it at once, got it while spinning,
// or slept for it, including answers larger than one read.
func TestReadsCarryEveryByte(t *testing.T) {
	c, srv, s := pair(t, time.Second, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make(chan int, 1)
	go func() { // the server: a size asked for, then that many bytes
		defer srv.Close()
		for n := range sizes {
			var b [1]byte
			if _, err := io.ReadFull(srv, b[:]); err != nil {
				return
			}
			if _, err := srv.Write(payload(n)); err != nil {
				return
			}
		}
	}()
	for i := range 500 {
		n := 1 + rng.IntN(16)
		if i%50 == 0 {
			n = 1 << 20 // more than a socket buffer: several reads
		}
		sizes <- n
		if _, err := c.Write([]byte{'?'}); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if !bytes.Equal(got, payload(n)) {
			t.Fatalf("answer %d: %d bytes differ from what was sent", i, n)
		}
	}
	close(sizes)
	if s.spins.Load() == 0 {
		t.Fatal("no read spun for its answer")
	}
	if s.misses.Load() != 0 {
		t.Fatalf("%d spins of a second ran out", s.misses.Load())
	}
	// The server closed: the end of the stream, as net.Conn reports it.
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + n)
	}
	return b
}

// A spin that runs out sleeps until the answer comes; the reads after it
// sleep at once (back-off), one read after the first miss, twice as many
// after each further miss in a row, and a read that gets its answer at
// once or while spinning starts the back-off over.
func TestSpinRunsOutThenSleeps(t *testing.T) {
	c, srv, s := pair(t, time.Microsecond, nil)
	send := func(b string) {
		t.Helper()
		if _, err := srv.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want string) {
		t.Helper()
		b := make([]byte, len(want))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
	}
	// missed reads until nothing is there: the answer comes once the
	// spin has run out.
	missed := func(want string) {
		t.Helper()
		misses := s.misses.Load()
		got := make(chan string, 1)
		go func() {
			b := make([]byte, len(want))
			_, err := io.ReadFull(c, b)
			got <- fmt.Sprint(string(b), err)
		}()
		deadline := time.Now().Add(5 * time.Second)
		for s.misses.Load() == misses {
			if time.Now().After(deadline) {
				t.Fatal("the spin never ran out")
			}
			time.Sleep(time.Millisecond)
		}
		send(want)
		if g := <-got; g != want+"<nil>" {
			t.Fatalf("read %q after sleeping, want %q", g, want)
		}
	}
	state := func(step string, skip, next int32, spins, misses int64) {
		t.Helper()
		if s.skip.Load() != skip || s.next.Load() != next || s.spins.Load() != spins || s.misses.Load() != misses {
			t.Fatalf("%s: skip %d next %d spins %d misses %d; want %d %d %d %d", step,
				s.skip.Load(), s.next.Load(), s.spins.Load(), s.misses.Load(), skip, next, spins, misses)
		}
		if s.busy.Load() {
			t.Fatalf("%s: the spinner is still held", step)
		}
	}
	missed("a")
	state("first miss", 1, 2, 0, 1)
	send("b")
	read("b") // sleeps at once (skipped)
	state("after the skipped read", 0, 2, 0, 1)
	missed("c")
	state("second miss in a row", 2, 4, 0, 2)
	send("d")
	read("d")
	send("e")
	read("e")
	state("after two skipped reads", 0, 4, 0, 2)
	send("f")
	read("f") // there at once: a hit
	state("after a hit", 0, 1, 1, 2)
	missed("g")
	state("a miss after a hit", 1, 2, 1, 3)
}

// A read deadline holds once the spin is over: a read with nothing to
// read fails with a timeout, and the connection stays usable.
func TestReadDeadline(t *testing.T) {
	c, srv, _ := pair(t, 100*time.Microsecond, nil)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := srv.Write([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 1); func() error { _, err := c.Read(b); return err }() != nil || b[0] != 'k' {
		t.Fatalf("read after clearing the deadline failed")
	}
}

// With a TLS configuration the spinning connection carries TLS, its
// handshake done, the server named as tls.Dial names it.
func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "over tls") }))
	defer srv.Close()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	dial := Dialer(&net.Dialer{}, Options{Spin: time.Millisecond, TLS: cfg})
	client := &http.Client{Transport: &http.Transport{DialTLSContext: dial}}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "over tls" {
			t.Fatalf("answer %q", b)
		}
	}
}

// A read spins only while the Dialer's condition holds: otherwise it
// sleeps at once, and neither takes the spinner nor counts as a spin.
func TestSpinOnlyWhen(t *testing.T) {
	var quiet atomic.Bool
	c, srv, s := pair(t, time.Second, quiet.Load)
	for i, q := range []bool{false, true, false} {
		quiet.Store(q)
		if _, err := srv.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil || b[0] != byte(i) {
			t.Fatalf("read %d: %v %v", i, b, err)
		}
	}
	if s.spins.Load() != 1 || s.misses.Load() != 0 {
		t.Fatalf("%d spins and %d misses for one read while quiet", s.spins.Load(), s.misses.Load())
	}
}
