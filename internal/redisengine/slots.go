package redisengine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
)

// Redis Cluster: which master holds a decision's keys, and the decisions
// whose keys span slots.

// Shards names the Redis Cluster masters (their addresses) that hold reqs'
// keys: first that of the first key, others those of the rest that differ
// from it, each once (nil for a decision on one master: most); "" on one
// Redis. Each master has a breaker of its own (see enter), and a decision
// whose keys span masters (rules keyed by different descriptors) passes
// each one's; its failure names the master that failed (see shardError).
func (e *Engine) Shards(ctx context.Context, reqs []limit.Request) (first string, others []string) {
	cc, ok := e.cluster, e.cluster != nil
	if !ok || len(reqs) == 0 {
		return "", nil
	}
	first = e.master(ctx, cc, reqs[0].Key)
	slot := Slot(e.cfg.Prefix + reqs[0].Key)
	for _, rq := range reqs[1:] {
		if s := Slot(e.cfg.Prefix + rq.Key); s != slot {
			if m := e.master(ctx, cc, rq.Key); m != first && !slices.Contains(others, m) {
				others = append(others, m)
			}
		}
	}
	return first, others
}

// master is the address of the master that holds key, "" when the cluster
// client does not know it.
func (e *Engine) master(ctx context.Context, cc Cluster, key string) string {
	c, err := cc.MasterForKey(ctx, e.cfg.Prefix+key)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// shardError is the failure of a decision spanning cluster masters on one
// of them, shard: it counts against that master's breaker alone.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string { return e.err.Error() }
func (e *shardError) Unwrap() error { return e.err }

// onShard wraps err, the failure of a call on key's slot, as that master's.
func (e *Engine) onShard(ctx context.Context, key string, err error) error {
	cc, ok := e.cluster, e.cluster != nil
	if !ok {
		return err
	}
	return &shardError{shard: e.master(ctx, cc, key), err: err}
}

// slotMoving reports whether err is a cluster node's answer while the
// slot of a call's keys moves to another node: TRYAGAIN (the call's keys
// are split between the two), or a redirection go-redis stopped following
// (it follows a few, and a pipeline's ASK not always).
func slotMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "MOVED")
}

// acrossSlots decides a decision whose keys span cluster slots: each slot's
// rules are evaluated all or nothing in their own call, reserving what they
// admit; once a slot rejects, the later slots are only read (what each rule
// would answer, nothing consumed: a lost decision holds nothing back), and
// the slots that reserved are refunded and re-read, so that their answers
// are of the untouched state. Nothing is ever over-admitted; between a
// reservation and its refund (one round trip), other decisions may see less
// remaining than there is.
func (e *Engine) acrossSlots(ctx context.Context, deadline time.Time, reqs []limit.Request, now string, res []limit.Result) (bool, error) {
	if now == "" { // one clock for every slot: Redis TIME differs per node
		now = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	var order []int
	groups := map[int][]int{}
	for i, rq := range reqs {
		s := Slot(e.cfg.Prefix + rq.Key)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	pick := func(idx []int, cost func(i int) int64) []limit.Request {
		out := make([]limit.Request, len(idx))
		for k, i := range idx {
			out[k] = reqs[i]
			out[k].Cost = cost(i)
		}
		return out
	}
	same := func(i int) int64 { return reqs[i].Cost }
	read := func(int) int64 { return 0 }
	admitted := true
	var reserved [][]int
	for _, s := range order {
		idx := groups[s]
		sub := make([]limit.Result, len(idx))
		cost := same
		if !admitted {
			cost = read
		}
		ok, err := e.run(ctx, deadline, "check", pick(idx, cost), now, sub)
		if err != nil {
			_ = e.undo(ctx, deadline, reserved, pick, same, now)
			return false, e.onShard(ctx, reqs[idx[0]].Key, err)
		}
		var committed []int // what this slot consumed: admitted rules of positive cost
		for k, i := range idx {
			res[i] = sub[k]
			if !admitted {
				res[i].AsCost(reqs[i].Cost, reqs[i].Limiter.Capacity())
			} else if ok && sub[k].Allowed && reqs[i].Cost > 0 {
				committed = append(committed, i)
			}
		}
		if !ok {
			admitted = false
		} else if len(committed) > 0 {
			reserved = append(reserved, committed)
		}
	}
	if admitted {
		return true, nil
	}
	if err := e.undo(ctx, deadline, reserved, pick, same, now); err != nil {
		return false, err
	}
	for _, idx := range reserved { // answer from the refunded state
		sub := make([]limit.Result, len(idx))
		if _, err := e.run(ctx, deadline, "check", pick(idx, read), now, sub); err != nil {
			return false, e.onShard(ctx, reqs[idx[0]].Key, err)
		}
		for k, i := range idx {
			res[i] = sub[k]
		}
	}
	return false, nil
}

// undo refunds what the reserved slot groups consumed.
func (e *Engine) undo(ctx context.Context, deadline time.Time, reserved [][]int, pick func([]int, func(int) int64) []limit.Request, cost func(int) int64, now string) error {
	for _, idx := range reserved {
		refund := pick(idx, cost)
		if _, err := e.run(ctx, deadline, "refund", refund, now, nil); err != nil {
			return e.onShard(ctx, refund[0].Key, err)
		}
	}
	return nil
}

// sameSlot reports whether every key hashes to the slot of the first.
func sameSlot(keys []string) bool {
	s := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != s {
			return false
		}
	}
	return true
}

// Slot returns the Redis Cluster slot of key: CRC16 of its hash tag (the
// text between the first '{' and the next '}', when not empty) or of the key.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM, the checksum of Redis Cluster key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
