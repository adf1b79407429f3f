// Package tlsfiles builds a server's TLS configuration from PEM files: a
// certificate and key, reread when they change (a rotated certificate is
// served without a restart), and optionally a CA bundle that clients'
// certificates must chain to (mutual TLS).
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ServerConfig returns a TLS configuration serving the key pair in
// certFile and keyFile, checked now and reread when either file's
// modification time changes; with clientCAFile, clients must present a
// certificate signed by one of its CAs.
func ServerConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a certificate needs its key, and a key its certificate")
	}
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA %s: no PEM certificate in it", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPair is a certificate and key read from files, reread when they
// change. A change that does not load (a half-written rotation) keeps the
// pair in use until one does.
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	certMod time.Time
	keyMod  time.Time
}

func (k *keyPair) get() (*tls.Certificate, error) {
	cs, cerr := os.Stat(k.certFile)
	ks, kerr := os.Stat(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if cerr != nil || kerr != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("tls: %w", errors.Join(cerr, kerr))
	}
	if k.cert != nil && cs.ModTime().Equal(k.certMod) && ks.ModTime().Equal(k.keyMod) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("tls: %w", err)
	}
	k.cert, k.certMod, k.keyMod = &c, cs.ModTime(), ks.ModTime()
	return k.cert, nil
}

// Listen listens on the TCP address addr, serving TLS with ServerConfig's
// configuration of the files when any is named (see Wrap), and says which
// scheme the listener serves: "https" or "http".
func Listen(addr, certFile, keyFile, clientCAFile string) (ln net.Listener, scheme string, err error) {
	if ln, err = net.Listen("tcp", addr); err != nil {
		return nil, "", err
	}
	if ln, scheme, err = Wrap(ln, certFile, keyFile, clientCAFile); err != nil {
		return nil, "", err
	}
	return ln, scheme, nil
}

// Wrap serves TLS on ln with ServerConfig's configuration of the files
// when any is named, HTTP/2 and HTTP/1.1 offered by ALPN, and says which
// scheme the listener serves: "https" or "http". A TLS handshake happens on
// a connection's first read or write, so servers bound it with their
// header timeouts. On an error it closes ln.
func Wrap(ln net.Listener, certFile, keyFile, clientCAFile string) (net.Listener, string, error) {
	if certFile == "" && keyFile == "" && clientCAFile == "" {
		return ln, "http", nil
	}
	cfg, err := ServerConfig(certFile, keyFile, clientCAFile)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return tls.NewListener(ln, cfg), "https", nil
}
