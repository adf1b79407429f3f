package tlsfiles

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/tlstest"
)

// serve accepts TLS connections with cfg and completes their handshakes.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// handshake connects as a client trusting ca (with cert, if given) and
// returns the server certificate's serial, or the handshake's error.
func handshake(addr string, ca *tlstest.CA, client *tls.Certificate) (int64, error) {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// With TLS 1.3 a refused client certificate shows on the first read.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "EOF") {
		return 0, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// The certificate served is the one in the files now: a rotation is
// served from the next handshake, and a half-written one does not stop
// the last good pair from being served.
func TestRotation(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1 := ca.Server(t, 1)
	tlstest.Write(t, certFile, c1, 0)
	tlstest.Write(t, keyFile, k1, 0)
	cfg, err := ServerConfig(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if s, err := handshake(addr, ca, nil); err != nil || s != 1 {
		t.Fatalf("serial %d, %v; want 1", s, err)
	}
	c2, k2 := ca.Server(t, 2)
	tlstest.Write(t, certFile, c2, 10)
	tlstest.Write(t, keyFile, k2, 10)
	if s, err := handshake(addr, ca, nil); err != nil || s != 2 {
		t.Fatalf("after the rotation: serial %d, %v; want 2", s, err)
	}
	tlstest.Write(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nhalf"), 20)
	if s, err := handshake(addr, ca, nil); err != nil || s != 2 {
		t.Fatalf("during a half-written rotation: serial %d, %v; want the last good, 2", s, err)
	}
}

// With a client CA only clients holding a certificate it signed get in.
func TestClientCertificates(t *testing.T) {
	ca, rogue := tlstest.NewCA(t), tlstest.NewCA(t)
	certFile, keyFile, caFile := ca.ServerFiles(t, t.TempDir(), 1)
	cfg, err := ServerConfig(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	pair := func(is *tlstest.CA) *tls.Certificate { c := is.Client(t); return &c }
	if _, err := handshake(addr, ca, pair(ca)); err != nil {
		t.Fatalf("a client the CA signed: %v", err)
	}
	if _, err := handshake(addr, ca, nil); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	if _, err := handshake(addr, ca, pair(rogue)); err == nil {
		t.Fatal("a client another CA signed got in")
	}
}

// Files that cannot serve are refused at start, each with what is wrong.
func TestBadFiles(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.ServerFiles(t, dir, 1)
	notPEM := filepath.Join(dir, "x.pem")
	tlstest.Write(t, notPEM, []byte("not pem"), 0)
	for _, tc := range []struct{ cert, key, ca, want string }{
		{certFile, "", "", "needs its key"},
		{certFile, filepath.Join(dir, "missing.pem"), "", "no such file"},
		{certFile, notPEM, "", "tls:"},
		{certFile, keyFile, notPEM, "no PEM certificate"},
		{certFile, keyFile, filepath.Join(dir, "missing.pem"), "client CA"},
	} {
		if _, err := ServerConfig(tc.cert, tc.key, tc.ca); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ServerConfig(%s, %s, %s): %v, want an error with %q", filepath.Base(tc.cert), filepath.Base(tc.key), filepath.Base(tc.ca), err, tc.want)
		}
	}
}
