package devstack

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/pgserver"
)

// privatePostgres starts, or finds already running, a PostgreSQL cluster
// of its own in dir (see pgserver) and returns its URL and a function
// that stops it.
func privatePostgres(dir string) (string, func(), error) {
	c, err := pgserver.Open(dir)
	if errors.Is(err, pgserver.ErrNoBinaries) {
		return "", nil, errors.New(`devstack: sluice dev needs PostgreSQL: none answers (at DATABASE_URL, else on 127.0.0.1:5432), and no server binaries (initdb, pg_ctl) were found to start one.
Install it, then run make dev again:
  Debian, Ubuntu:  sudo apt-get install -y postgresql
  macOS:           brew install postgresql@16
or set DATABASE_URL to a running server`)
	}
	if err != nil {
		return "", nil, err
	}
	u, err := c.Start()
	if err != nil {
		return "", nil, err
	}
	return u, func() { _ = c.Stop() }, nil
}

// privateDir is where the private cluster of a dev directory lives: in it,
// or, as root (PostgreSQL then runs as the postgres user, who cannot reach
// root's home), in /var/tmp under a name derived from it.
func privateDir(devDir string) string {
	if os.Geteuid() != 0 {
		return filepath.Join(devDir, "postgres")
	}
	sum := sha256.Sum256([]byte(devDir))
	return filepath.Join("/var/tmp", "sluice-dev-"+hex.EncodeToString(sum[:6]), "postgres")
}

// reachable reports whether a TCP connection to host:port opens quickly.
func reachable(hostport string) bool {
	c, err := net.DialTimeout("tcp", hostport, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
