// Package kafkasec configures how Sluice's Kafka clients (the deciders'
// event publisher, the analytics consumer) reach a broker that asks for
// TLS, a client certificate or SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
// as managed Kafka services do. The password comes from the environment
// only, never a flag, so that it shows in no process listing, and no
// error or log line carries it.
package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/sluicehq/sluice/internal/flagenv"
)

// Config says how to connect to the brokers. The zero Config is plaintext
// without authentication.
type Config struct {
	// TLS connects over TLS, verifying the brokers against the system's
	// roots, or CAFile's when set (which implies TLS, as CertFile does).
	TLS      bool
	CAFile   string
	CertFile string // a client certificate (PEM), with KeyFile
	KeyFile  string
	// SASL is the mechanism: "", plain, scram-sha-256 or scram-sha-512.
	SASL     string
	Username string
	Password string
}

// Register defines the flags of c on fs, their defaults from the
// environment (KAFKA_TLS, KAFKA_TLS_CA, KAFKA_TLS_CERT, KAFKA_TLS_KEY,
// KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME), and reads the password from
// KAFKA_SASL_PASSWORD. The flags are read once fs is parsed.
func Register(fs *flag.FlagSet, env *flagenv.Env) *Config {
	e := env.Get
	c := &Config{Password: e("KAFKA_SASL_PASSWORD")}
	fs.BoolVar(&c.TLS, "kafka-tls", env.Bool("KAFKA_TLS", false), "connect to Kafka over TLS (env KAFKA_TLS=true)")
	fs.StringVar(&c.CAFile, "kafka-tls-ca", e("KAFKA_TLS_CA"), "PEM CA bundle verifying the Kafka brokers (implies -kafka-tls; default the system's roots)")
	fs.StringVar(&c.CertFile, "kafka-tls-cert", e("KAFKA_TLS_CERT"), "PEM client certificate for Kafka (implies -kafka-tls)")
	fs.StringVar(&c.KeyFile, "kafka-tls-key", e("KAFKA_TLS_KEY"), "PEM private key of -kafka-tls-cert")
	fs.StringVar(&c.SASL, "kafka-sasl", e("KAFKA_SASL_MECHANISM"), "SASL mechanism for Kafka: plain, scram-sha-256 or scram-sha-512 (password from KAFKA_SASL_PASSWORD)")
	fs.StringVar(&c.Username, "kafka-sasl-username", e("KAFKA_SASL_USERNAME"), "SASL user name for Kafka")
	return c
}

// FromEnv returns the Config of the environment's variables, as Register
// would with no flag given.
func FromEnv(getenv func(string) string) *Config {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	return Register(fs, flagenv.NewEnv(getenv))
}

// Build returns the TLS configuration (nil for plaintext) and the SASL
// mechanism (nil for none) of c, or an error naming what is wrong.
func (c *Config) Build() (*tls.Config, sasl.Mechanism, error) {
	var tc *tls.Config
	if c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			b, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("kafka tls: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(b) {
				return nil, nil, fmt.Errorf("kafka tls: no PEM certificate in %s", c.CAFile)
			}
		}
		if (c.CertFile == "") != (c.KeyFile == "") {
			return nil, nil, errors.New("kafka tls: a client certificate needs both -kafka-tls-cert and -kafka-tls-key")
		}
		if c.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, nil, fmt.Errorf("kafka tls: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
	}
	mech, err := c.mechanism()
	return tc, mech, err
}

func (c *Config) mechanism() (sasl.Mechanism, error) {
	name := strings.ToLower(strings.TrimSpace(c.SASL))
	if name == "" {
		if c.Username != "" {
			return nil, errors.New("kafka sasl: a user name without -kafka-sasl (plain, scram-sha-256 or scram-sha-512)")
		}
		return nil, nil
	}
	if c.Username == "" || c.Password == "" {
		return nil, fmt.Errorf("kafka sasl: %s needs -kafka-sasl-username and KAFKA_SASL_PASSWORD", name)
	}
	switch name {
	case "plain":
		return plain.Mechanism{Username: c.Username, Password: c.Password}, nil
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if name == "scram-sha-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.Username, c.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka sasl: %s: invalid user name or password", name) // never the password itself
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q (plain, scram-sha-256 or scram-sha-512)", c.SASL)
}

// Transport returns a kafka-go transport for writers connecting as c
// says; nil (kafka-go's default) for plaintext without SASL.
func (c *Config) Transport() (kafka.RoundTripper, error) {
	tc, mech, err := c.Build()
	if err != nil || tc == nil && mech == nil {
		return nil, err
	}
	return &kafka.Transport{TLS: tc, SASL: mech, DialTimeout: 5 * time.Second}, nil
}

// Dialer returns a kafka-go dialer for readers and consumer groups
// connecting as c says; nil (kafka-go's default) for plaintext without
// SASL.
func (c *Config) Dialer() (*kafka.Dialer, error) {
	tc, mech, err := c.Build()
	if err != nil || tc == nil && mech == nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tc, SASLMechanism: mech}, nil
}
