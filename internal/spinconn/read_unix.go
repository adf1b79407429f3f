//go:build unix

package spinconn

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"time"
)

// Read reads as the connection does, but when nothing is there yet and
// the spinner is free, polls (a non-blocking read, then a yield to other
// goroutines) until data comes or the budget runs out, and only then
// sleeps in the runtime's poller, which also keeps the read deadline.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 || !c.s.mayspin() {
		return c.Conn.Read(p)
	}
	var (
		n       int
		rerr    error
		start   time.Time
		holding = true // the spinner
	)
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr == syscall.EINTR {
				continue
			}
			if rerr != syscall.EAGAIN || !holding {
				break
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > c.s.budget {
				c.s.done(false)
				holding = false
				return false // sleep until readable
			}
			runtime.Gosched()
		}
		return rerr != syscall.EAGAIN
	})
	if holding {
		c.s.done(true)
	}
	switch {
	case err != nil: // closed, or the deadline passed while it slept
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
