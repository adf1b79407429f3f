// Package spinconn wraps TCP and Unix connections so that a read finding
// nothing to read polls for a short while before it sleeps.
//
// On an idle virtual machine a thread that sleeps waiting for a reply is
// woken tens of microseconds after the reply arrives (its vCPU halts, and
// the hypervisor takes time to bring it back): at low load, a strict
// decision, one round trip to Redis, takes several times as long as under
// load (docs/benchmarks.md). A read that polls keeps its thread and vCPU
// awake for replies that come within the spin budget.
//
// Polling costs CPU, so it is for when the process is nearly idle: the
// Dialer's caller says when (a decider: while at most two decisions are
// waiting; under load its threads are awake anyway, and a spinning read
// would take CPU that the load generator, or Redis, on the same cores
// needs).
// Between polls the reader yields to any runnable goroutine; one read of
// all a Dialer's connections spins at a time; and a read whose reply did
// not come within the budget (a busy server, or one that answers slowly)
// turns spinning off for the Dialer's next reads, for longer after each
// miss in a row, so that when replies keep coming late reads sleep (one
// read in 65 tries a spin), while an occasional slow reply costs little.
package spinconn

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBackoff bounds how many reads sleep at once after spins that ran
// out: the first miss skips one read, each miss after it twice as many as
// the one before, and a spin that gets its reply starts over.
const maxBackoff = 64

// Options configure a Dialer.
type Options struct {
	// Spin is how long a read polls before it sleeps; <= 0 dials plain
	// connections.
	Spin time.Duration
	// TLS, if set, is spoken over the wrapped connection, its handshake
	// done by the Dialer.
	TLS *tls.Config
	// When says whether reads may spin now; nil means always.
	When func() bool
	// Stats, if set, counts the spins.
	Stats *Stats
}

// Stats counts a Dialer's spins.
type Stats struct {
	spins  atomic.Int64 // reads that held the spinner and got their reply
	misses atomic.Int64 // spins that ran out
}

// Spins is how many reads spun (or found their reply at once) and got
// it; Misses, how many spun out their time and then slept.
func (s *Stats) Spins() int64  { return s.spins.Load() }
func (s *Stats) Misses() int64 { return s.misses.Load() }

// Dialer dials with d and wraps each connection so that its reads spin
// as o says. The dialed connections share one spinner and one back-off.
func Dialer(d *net.Dialer, o Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if o.Stats == nil {
		o.Stats = new(Stats)
	}
	s := &spinner{budget: o.Spin, when: o.When, Stats: o.Stats}
	spin, tlsConfig := o.Spin, o.TLS
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if spin > 0 {
			c = s.wrap(c)
		}
		if tlsConfig == nil {
			return c, nil
		}
		cfg := tlsConfig
		if cfg.ServerName == "" { // as tls.Dial names the server
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// spinner is the state a Dialer's connections share.
type spinner struct {
	budget time.Duration
	when   func() bool
	busy   atomic.Bool  // a read is spinning
	skip   atomic.Int32 // reads left to sleep at once after a spin ran out
	next   atomic.Int32 // the skip after the next miss
	*Stats
}

func (s *spinner) wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &conn{Conn: c, raw: raw, s: s}
}

// conn is a connection whose reads poll (read.go).
type conn struct {
	net.Conn
	raw syscall.RawConn
	s   *spinner
}

// SyscallConn gives the underlying connection's raw access (go-redis
// checks a pooled connection's health through it).
func (c *conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// mayspin reports whether a read may spin now, taking the spinner if so.
func (s *spinner) mayspin() bool {
	if s.when != nil && !s.when() {
		return false
	}
	if n := s.skip.Load(); n > 0 {
		s.skip.Add(-1)
		return false
	}
	return s.busy.CompareAndSwap(false, true)
}

// done releases the spinner after a spin that got (ok) or missed its reply.
func (s *spinner) done(ok bool) {
	if ok {
		s.spins.Add(1)
		s.next.Store(1)
	} else {
		s.misses.Add(1)
		n := max(s.next.Load(), 1)
		s.skip.Store(n)
		s.next.Store(min(2*n, maxBackoff))
	}
	s.busy.Store(false)
}
