package grpcserve

import (
	"bufio"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/decision"
)

// A client may keep an idle connection alive with PINGs as often as the
// policy allows (Envoy's connection_keepalive), and is still sent away
// when it pings faster. The policy's interval is shortened for the test.
func TestKeepalivePings(t *testing.T) {
	const minTime = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(decision.Service{})
	srv.pingMinTime = minTime
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	// pings sends n PINGs on a fresh idle connection, every gap, each
	// after the last one's ack, and reports whether the server sent
	// GOAWAY or closed the connection.
	pings := func(n int, gap time.Duration) (goaway bool) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, bufio.NewReader(c))
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if i > 0 {
				time.Sleep(gap) // the pace under test
			}
			if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				return true // closed after a GOAWAY
			}
			for acked := false; !acked; {
				f, err := fr.ReadFrame()
				if err != nil {
					return true
				}
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					return true
				case *http2.SettingsFrame:
					if !f.IsAck() {
						_ = fr.WriteSettingsAck()
					}
				case *http2.PingFrame:
					acked = f.IsAck() && f.Data[0] == byte(i)
				}
			}
		}
		return false
	}
	if pings(5, minTime+20*time.Millisecond) {
		t.Fatal("PINGs on an idle connection at the policy's pace were answered with GOAWAY")
	}
	if !pings(6, 0) {
		t.Fatal("a PING flood was tolerated")
	}
}
