package events

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// A checkpoint keeps, beside the spool, what a publisher holds of its
// counts in memory, so that a decider killed outright (SIGKILL, the OOM
// killer) loses at most CheckpointInterval of them instead of a delta
// interval's: the counter deltas built but not yet delivered, as stamped
// (sent again after a restart under their run's id and sequence numbers,
// analytics counts each once), and the counts not yet taken into a delta
// (sent after a restart as new deltas). Written at each interval and as
// soon as deltas are taken, before they are sent, by renaming a new file
// over the old (Spool.WriteFile, synced): the file is always one whole
// checkpoint, and outlives the process and the machine.
const checkpointFile = "counts.checkpoint"

type checkpoint struct {
	At      time.Time        `json:"at"`
	Since   time.Time        `json:"since"`   // the start of Counts' period
	Pending []pendingMessage `json:"pending"` // stamped deltas not known delivered
	Counts  []ruleCounts     `json:"counts"`
	Dropped map[string]int64 `json:"dropped,omitempty"` // rejections dropped per tenant
}

type pendingMessage struct {
	Key, Value []byte
	// Partition is where the delta was written before (its pin), if it
	// was: it goes there again.
	Partition *int `json:",omitempty"`
}

type ruleCounts struct {
	Tenant, Tier, Rule        string
	Allowed, Rejected, Shadow int64
}

// checkpoint writes what batch holds of deltas and the counts not yet
// taken; Run's own. Without a spool there is nowhere to keep it.
func (p *Publisher) checkpoint(batch []kafka.Message) {
	if p.cfg.Spool == nil {
		return
	}
	c := checkpoint{At: p.cfg.Now(), Since: p.since}
	for _, m := range batch {
		if m.Headers != nil { // a delta
			pm := pendingMessage{Key: m.Key, Value: m.Value}
			if pn := pinOf(m); pn != nil && pn.partition != unpinned {
				pm.Partition = &pn.partition
			}
			c.Pending = append(c.Pending, pm)
		}
	}
	p.mu.RLock()
	for _, m := range []map[ruleKey]*counts{p.rules, p.retired} {
		for k, n := range m {
			if a, r, s := n.allowed.Load(), n.rejected.Load(), n.shadow.Load(); a+r+s > 0 {
				c.Counts = append(c.Counts, ruleCounts{k.tenant, k.tier, k.rule, a, r, s})
			}
		}
	}
	for tenant, d := range p.dropped {
		if n := d.Load(); n > 0 {
			if c.Dropped == nil {
				c.Dropped = map[string]int64{}
			}
			c.Dropped[tenant] = n
		}
	}
	p.mu.RUnlock()
	if len(c.Pending) == 0 && len(c.Counts) == 0 && len(c.Dropped) == 0 && !p.checkpointed {
		return // nothing held, and nothing on disk to replace
	}
	if err := p.writeCheckpoint(c); err != nil {
		if !p.checkpointFailed {
			p.cfg.Logger.Warn("events: writing the counts' checkpoint", "err", err)
		}
		p.checkpointFailed = true
		return
	}
	p.checkpointFailed = false
	p.checkpointed = len(c.Pending)+len(c.Counts)+len(c.Dropped) > 0
}

func (p *Publisher) writeCheckpoint(c checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return p.cfg.Spool.WriteFile(checkpointFile, b)
}

// recoverCheckpoint returns what an earlier run's checkpoint held, to send
// first: its pending deltas as they were, and its counts as deltas of this
// run. A checkpoint that cannot be read is reported and ignored.
func (p *Publisher) recoverCheckpoint() []kafka.Message {
	if p.cfg.Spool == nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(p.cfg.Spool.Dir(), checkpointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var c checkpoint
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		p.cfg.Logger.Error("events: an earlier run's counts' checkpoint cannot be read; its counts are lost", "err", err)
		return nil
	}
	out := make([]kafka.Message, 0, len(c.Pending)+len(c.Counts)+len(c.Dropped))
	for _, m := range c.Pending {
		pn := newPin(unpinned)
		if m.Partition != nil && *m.Partition >= 0 {
			pn.partition = *m.Partition
		}
		out = append(out, kafka.Message{Key: m.Key, Value: m.Value, Headers: deltaHeader, WriterData: pn})
	}
	if c.At.Before(c.Since) {
		c.At = c.Since
	}
	from, to := timestamppb.New(c.Since), timestamppb.New(c.At)
	add := func(tenant string, d *sluicev1.CounterDelta) { out = append(out, p.deltaMessage(tenant, d, from, to)) }
	for _, n := range c.Counts {
		add(n.Tenant, &sluicev1.CounterDelta{Tier: n.Tier, RuleId: n.Rule, Allowed: n.Allowed, Rejected: n.Rejected, ShadowRejected: n.Shadow})
	}
	for tenant, n := range c.Dropped {
		add(tenant, &sluicev1.CounterDelta{DroppedRejections: n})
	}
	if len(out) > 0 {
		p.cfg.Logger.Info("events: sending the counts an earlier run left in its checkpoint", "deltas", len(out))
	}
	p.checkpointed = true // replaced by the next checkpoint, which holds these as pending
	return out
}
