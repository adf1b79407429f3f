package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuProbe reads the CPU time a process (pid) and a Redis (redis, its
// host:port) have used, for `sluice bench` to report what its load cost
// them per decision: a throughput ratio on a shared machine depends on the
// load generator's share of it, a cost per decision does not.
type cpuProbe struct {
	pid   int
	redis string
}

// cpuTimes is what a cpuProbe read.
type cpuTimes struct{ proc, redis time.Duration }

// read returns the CPU time used so far by the probed process and Redis
// (zero for either not probed).
func (p cpuProbe) read(ctx context.Context) (cpuTimes, error) {
	var t cpuTimes
	var err error
	if p.pid > 0 {
		if t.proc, err = procCPU(p.pid); err != nil {
			return t, err
		}
	}
	if p.redis != "" {
		if t.redis, err = redisCPU(ctx, p.redis); err != nil {
			return t, err
		}
	}
	return t, nil
}

// report sets res's CPU per decision from what was used since before.
func (p cpuProbe) report(ctx context.Context, before cpuTimes, res *benchResult) error {
	if (p.pid == 0 && p.redis == "") || res.Decisions == 0 {
		return nil
	}
	after, err := p.read(ctx)
	if err != nil {
		return err
	}
	n := float64(res.Decisions)
	res.ServerCPUus = float64(after.proc-before.proc) / float64(time.Microsecond) / n
	res.RedisCPUus = float64(after.redis-before.redis) / float64(time.Microsecond) / n
	return nil
}

// userHZ is the unit of /proc's CPU times: the kernel's USER_HZ, 100 on
// every architecture Linux reports to user space in it.
const userHZ = 100

// procCPU is the user and system CPU time of process pid, its exited
// threads included, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("-pid %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields that
	// follow it are state (3), …, utime (14) and stime (15).
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("-pid %d: unexpected /proc/%d/stat: %q", pid, pid, s)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("-pid %d: /proc/%d/stat: %w", pid, pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// redisCPU is the user and system CPU time the Redis at addr has used
// (INFO cpu's used_cpu_user and used_cpu_sys, its main thread's and the
// others').
func redisCPU(ctx context.Context, addr string) (time.Duration, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}) // a CLI answers at once
	defer c.Close()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("-redis %s: %w", addr, err)
	}
	var total time.Duration
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || k != "used_cpu_user" && k != "used_cpu_sys" {
			continue
		}
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("-redis %s: INFO cpu %s: %w", addr, k, err)
		}
		total += time.Duration(secs * float64(time.Second))
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("-redis %s: INFO cpu without used_cpu_user and used_cpu_sys", addr)
	}
	return total, nil
}
