package kafkasec

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

const password = "pa55-w0rd-never-shown"

// Invalid settings are refused with what is wrong, never the password.
func TestBuildRefusesInvalidSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown mechanism", Config{SASL: "gssapi", Username: "u", Password: password}, "unknown mechanism"},
		{"no password", Config{SASL: "plain", Username: "u"}, "KAFKA_SASL_PASSWORD"},
		{"no user", Config{SASL: "scram-sha-512", Password: password}, "username"},
		{"user without mechanism", Config{Username: "u", Password: password}, "without -kafka-sasl"},
		{"certificate without key", Config{CertFile: filepath.Join(dir, "c.pem")}, "both"},
		{"missing CA", Config{CAFile: filepath.Join(dir, "none.pem")}, "no such file"},
	} {
		_, _, err := tc.cfg.Build()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
	if tr, err := (&Config{}).Transport(); tr != nil || err != nil {
		t.Fatalf("the zero config: %v, %v; want kafka-go's default", tr, err)
	}
}

// The environment configures what the flags would.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"KAFKA_TLS": "true", "KAFKA_TLS_CA": "/ca.pem", "KAFKA_SASL_MECHANISM": "scram-sha-256",
		"KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": password}
	c := FromEnv(func(k string) string { return env[k] })
	if want := (Config{TLS: true, CAFile: "/ca.pem", SASL: "scram-sha-256", Username: "u", Password: password}); *c != want {
		t.Fatalf("%+v, want %+v", *c, want)
	}
}

// A writer and a reader configured here reach a broker that asks for TLS
// and SASL, with each mechanism; a wrong password or no TLS does not.
func TestTLSAndSASLAgainstABroker(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			topic := kafkatest.Topic(t)
			broker, caFile := kafkatest.StartSecure(t, 1, []string{topic}, mech, "sluice", password)
			good := Config{CAFile: caFile, SASL: strings.ToLower(mech), Username: "sluice", Password: password}
			if err := write(broker.Addrs(), topic, &good, "hello"); err != nil {
				t.Fatalf("write: %v", err)
			}
			dialer, err := good.Dialer()
			if err != nil {
				t.Fatal(err)
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: broker.Addrs(), Topic: topic, Partition: 0, Dialer: dialer, MaxWait: 50 * time.Millisecond})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m, err := r.ReadMessage(ctx)
			if err != nil || string(m.Value) != "hello" {
				t.Fatalf("read: %q, %v", m.Value, err)
			}

			wrong := good
			wrong.Password = "not-it"
			if err := write(broker.Addrs(), topic, &wrong, "x"); err == nil {
				t.Fatal("a wrong password was let in")
			}
			plain := Config{SASL: strings.ToLower(mech), Username: "sluice", Password: password}
			if err := write(broker.Addrs(), topic, &plain, "x"); err == nil {
				t.Fatal("a plaintext client was let in")
			}
		})
	}
}

func write(brokers []string, topic string, c *Config, value string) error {
	tr, err := c.Transport()
	if err != nil {
		return err
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Transport: tr, MaxAttempts: 1, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.WriteMessages(ctx, kafka.Message{Value: []byte(value)})
}
