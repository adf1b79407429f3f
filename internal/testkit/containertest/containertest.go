// Package containertest starts PostgreSQL and Redis in containers with
// testcontainers-go, for machines where the services are not installed. It
// first pings the Docker engine with a short timeout: without one (or with a
// socket that accepts and never answers, which hangs testcontainers
// forever) it reports unavailability at once.
package containertest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// PingTimeout bounds the Docker engine check.
const PingTimeout = 2 * time.Second

// DockerSocket returns the unix socket of the Docker engine: DOCKER_HOST's
// when it names one, else /var/run/docker.sock.
func DockerSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		return h
	}
	return "/var/run/docker.sock"
}

// DockerAvailable reports whether the engine at socket answers GET /_ping
// with OK within timeout.
func DockerAvailable(socket string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return false
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return false
	}
	if _, err := c.Write([]byte("GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")); err != nil {
		return false
	}
	status, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.Contains(status, " 200 ")
}

// Postgres starts PostgreSQL 15 and returns its URL and a stop function.
func Postgres(ctx context.Context) (string, func(), error) {
	if !DockerAvailable(DockerSocket(), PingTimeout) {
		return "", nil, fmt.Errorf("containertest: no Docker engine answers at %s", DockerSocket())
	}
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("test"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", nil, fmt.Errorf("containertest: postgres: %w", err)
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return url, func() { _ = testcontainers.TerminateContainer(c) }, nil
}

// Redis starts Redis 7 and returns its address and a stop function.
func Redis(ctx context.Context) (string, func(), error) {
	if !DockerAvailable(DockerSocket(), PingTimeout) {
		return "", nil, fmt.Errorf("containertest: no Docker engine answers at %s", DockerSocket())
	}
	c, err := tcredis.Run(ctx, "redis:7-alpine")
	if err != nil {
		return "", nil, fmt.Errorf("containertest: redis: %w", err)
	}
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return strings.TrimPrefix(uri, "redis://"), func() { _ = testcontainers.TerminateContainer(c) }, nil
}
