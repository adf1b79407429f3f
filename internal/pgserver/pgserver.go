// Package pgserver runs a PostgreSQL cluster of its own, in a data
// directory, from the locally installed server binaries: sluice dev's
// database when no server answers, and the throwaway server of tests that
// stop their database.
package pgserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Cluster is a PostgreSQL cluster in a data directory. It listens on a
// loopback port with trust authentication and no Unix socket; its data
// stays in the directory, so a later Open finds it again.
//
// PostgreSQL refuses to run as root: as root the cluster runs as the
// postgres user, who must own the directory and be able to reach it (Open
// gives it the directory and its parent).
type Cluster struct {
	dir  string
	port int
	run  func(name string, args ...string) *exec.Cmd
}

// Open returns the cluster in dir, creating it (initdb) when dir holds
// none. It does not start it.
func Open(dir string) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, run: func(name string, args ...string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, name), args...)
	}}
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("pgserver: running as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chown(d, uid, gid); err != nil {
				return nil, err
			}
		}
		c.run = func(name string, args ...string) *exec.Cmd {
			cmd := exec.Command(filepath.Join(bin, name), args...)
			cmd.Dir = dir                        // postgres may not enter root's working directory
			runAs(cmd, uint32(uid), uint32(gid)) // no runuser needed: it may not be on root's PATH
			return cmd
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if out, err := c.run("initdb", "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pgserver: initdb: %v: %s", err, out)
		}
	}
	return c, nil
}

// Start starts the cluster, or finds it running, and returns the URL of
// its postgres database. A cluster this Cluster started before starts
// again on the same port, so its URL stays the same; otherwise it takes a
// free one.
func (c *Cluster) Start() (string, error) {
	if port, ok := runningPort(c.dir); ok && c.run("pg_ctl", "-D", c.dir, "status").Run() == nil {
		c.port = port
		return c.URL(), nil
	}
	if c.port == 0 {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		c.port = port
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=''", c.port)
	if out, err := c.run("pg_ctl", "-D", c.dir, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgserver: start PostgreSQL in %s: %v: %s", c.dir, err, out)
	}
	return c.URL(), nil
}

// Stop stops the cluster at once (fast shutdown: open sessions are ended,
// committed data kept) and waits until it has stopped.
func (c *Cluster) Stop() error {
	if out, err := c.run("pg_ctl", "-D", c.dir, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: stop PostgreSQL in %s: %v: %s", c.dir, err, out)
	}
	return nil
}

// URL returns the URL of the cluster's postgres database (once started).
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// runningPort reads the port of a server running in dir from its
// postmaster.pid (the fourth line).
func runningPort(dir string) (int, bool) {
	f, err := os.Open(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		if i == 3 {
			port, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			return port, err == nil
		}
	}
	return 0, false
}

// ErrNoBinaries is returned by Open where no PostgreSQL server binaries
// are installed.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL server binaries (initdb, pg_ctl) found")

// binDir finds the directory of the installed server binaries:
// $SLUICE_POSTGRES_BIN when set (and then nowhere else), else
// pg_config's, else the newest /usr/lib/postgresql/<version>/bin.
func binDir() (string, error) {
	if dir := os.Getenv("SLUICE_POSTGRES_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", ErrNoBinaries
		}
		return dir, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
