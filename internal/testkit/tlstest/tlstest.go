// Package tlstest makes certificates for tests: a CA, and server and
// client certificates it signs, as PEM in memory or in files.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority valid for an hour around now.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA returns a fresh CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1000), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server returns a PEM certificate for 127.0.0.1 with serial, and its key.
func (ca *CA) Server(t testing.TB, serial int64) (certPEM, keyPEM []byte) {
	return ca.leaf(t, serial, true, "")
}

// Client returns a client certificate the CA signed.
func (ca *CA) Client(t testing.TB) tls.Certificate { return ca.ClientNamed(t, "") }

// ClientNamed returns a client certificate the CA signed for name: a URI
// subject alternative name when name is a URI (a SPIFFE ID, say), else its
// common name ("leaf" when empty).
func (ca *CA) ClientNamed(t testing.TB, name string) tls.Certificate {
	t.Helper()
	c, k := ca.leaf(t, 7, false, name)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func (ca *CA) leaf(t testing.TB, serial int64, server bool, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if u, err := url.Parse(name); err == nil && u.Scheme != "" {
		tmpl.URIs = []*url.URL{u}
	} else if name != "" {
		tmpl.Subject.CommonName = name
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// ServerFiles writes a server certificate with serial and its key, and
// the CA, to dir, and returns their paths.
func (ca *CA) ServerFiles(t testing.TB, dir string, serial int64) (certFile, keyFile, caFile string) {
	t.Helper()
	c, k := ca.Server(t, serial)
	certFile, keyFile, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	Write(t, certFile, c, 0)
	Write(t, keyFile, k, 0)
	Write(t, caFile, ca.PEM, 0)
	return certFile, keyFile, caFile
}

// Write puts b in file with a modification time step seconds ahead, so
// that a rewrite within one tick of the file system's clock still reads
// as a change.
func Write(t testing.TB, file string, b []byte, step int) {
	t.Helper()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := time.Now().Add(time.Duration(step) * time.Second)
	if err := os.Chtimes(file, m, m); err != nil {
		t.Fatal(err)
	}
}
