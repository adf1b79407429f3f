package devstack

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
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
	"time"
)

// privatePostgres starts, or finds already running, a PostgreSQL cluster
// of its own in dir, from the locally installed server binaries, and
// returns its URL and a function that stops it. The cluster listens on a
// free loopback port with trust authentication and no Unix socket; its
// data stays in dir, so a second run finds it again.
//
// PostgreSQL refuses to run as root: as root the cluster runs as the
// postgres user, in a directory that user owns.
func privatePostgres(dir string) (string, func(), error) {
	bin, err := postgresBin()
	if err != nil {
		return "", nil, err
	}
	run := func(name string, args ...string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, name), args...)
	}
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, errors.New("devstack: running as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, err
		}
		for _, d := range []string{filepath.Dir(dir), dir} { // privateDir's own directories
			if err := os.Chown(d, uid, gid); err != nil {
				return "", nil, err
			}
		}
		run = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if out, err := run("initdb", "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("devstack: initdb: %v: %s", err, out)
		}
	}
	stop := func() { _ = run("pg_ctl", "-D", dir, "-m", "fast", "-w", "stop").Run() }
	if port, ok := runningPort(dir); ok && run("pg_ctl", "-D", dir, "status").Run() == nil {
		return localURL(port), stop, nil
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=''", port)
	if out, err := run("pg_ctl", "-D", dir, "-l", filepath.Join(dir, "server.log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("devstack: start PostgreSQL in %s: %v: %s", dir, err, out)
	}
	return localURL(port), stop, nil
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

func localURL(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
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

// postgresBin finds the directory of the installed server binaries:
// pg_config's, else the newest /usr/lib/postgresql/<version>/bin.
func postgresBin() (string, error) {
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
	return "", errors.New("devstack: no PostgreSQL server binaries (initdb, pg_ctl) found; install PostgreSQL or set DATABASE_URL")
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

// reachable reports whether a TCP connection to host:port opens quickly.
func reachable(hostport string) bool {
	c, err := net.DialTimeout("tcp", hostport, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
