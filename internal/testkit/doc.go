// Package testkit groups the helpers tests share, one package each: real
// PostgreSQL (pgtest), Redis (redistest) and the Kafka protocol
// (kafkatest) for each test in isolation, containers where a Docker
// engine answers (containertest), TLS certificates (tlstest), captured
// logs (logtest), one CPU-heavy test at a time (cputest) by a lock every process shares (filelock), sluice dev's stack and its banner (devtest), and the
// decision engines' conformance suite (enginetest). Nothing outside tests
// imports them.
package testkit
