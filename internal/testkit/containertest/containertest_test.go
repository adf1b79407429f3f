package containertest

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A socket that accepts and never answers must not hang the check.
func TestDockerAvailableGivesUpOnASilentSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, say nothing
		}
	}()
	done := make(chan bool, 1)
	go func() { done <- DockerAvailable(sock, 200*time.Millisecond) }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("a silent socket reported as a Docker engine")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DockerAvailable hung on a silent socket")
	}
}

func TestDockerAvailableAnswersOK(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK"))
	}()
	if !DockerAvailable(sock, 5*time.Second) {
		t.Fatal("an engine answering 200 was not seen")
	}
	if DockerAvailable(filepath.Join(t.TempDir(), "missing.sock"), time.Second) {
		t.Fatal("a missing socket reported as a Docker engine")
	}
}
