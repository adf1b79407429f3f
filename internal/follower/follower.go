// Package follower keeps a decider's configuration: it pulls every
// tenant's snapshot from the control plane, follows its changes over the
// config watch, compiles them for the decider, keeps the check keys that
// name each tenant (Keys), reports the decider's health with each pull
// (Health), and writes the last-known-good state to a file to start from
// without the control plane.
package follower

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/atomicfile"
	"github.com/sluicehq/sluice/internal/decide"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// Config configures a Follower.
type Config struct {
	Client sluicev1connect.ConfigServiceClient
	// Key is the decider credential (the control plane's SLUICE_DECIDER_KEY).
	Key string
	// KeyFunc, when set, is asked for the credential at each call instead
	// of Key: a key file reread when it changes (secretfile.File.Get).
	KeyFunc func() string
	// HealthFunc, when set, says how the decider fares, reported with each
	// pull for the operator's list of deciders.
	HealthFunc func() *sluicev1.DeciderHealth
	// Name identifies this decider to the control plane's list of
	// deciders (such as host/pid); "" leaves it unlisted.
	Name string
	// ShadowAll puts every rule of every tenant in shadow (decide.Compiled.
	// ShadowAll): the decider reports what its limits would do and
	// rejects nothing.
	ShadowAll bool
	// Keys is the check-key table the Follower keeps current.
	Keys *Keys
	// StateFile keeps the last good configuration, loaded at start when the
	// control plane cannot be reached; "" disables it.
	StateFile string
	// Repull is how often everything is pulled again as a backstop to the
	// watch; 0 means 30s.
	Repull time.Duration
	// PullTimeout bounds one pull; 0 means 30s. A first pull carries every
	// tenant whole: 100,000 overrides of one take a second here, and a pull
	// cut short is started again whole, so that a bound under what the
	// configuration takes would leave the decider never ready. The first
	// pull at start, when a state file is there to fall back on, waits at
	// most 5s (firstPullTimeout) before the decider starts from it.
	PullTimeout time.Duration
	// OnChange, when set, is told of each tenant's configuration replaced
	// (old, next) or removed (old, nil), after the swap: the decider's
	// metrics forget what is gone (Metrics.Forget).
	OnChange func(old, next *decide.Compiled)
	// OnFleet, when set, is told the number of live deciders each time the
	// control plane says it (each pull, and the watch when it changes):
	// the decider's share of a limit it enforces alone.
	OnFleet func(live int)
	Logger  *slog.Logger
}

// Follower keeps a decider's tenant configurations current: a first pull,
// the control plane's watch stream, a periodic re-pull, and the last good
// configuration on disk. Each tenant's snapshot is compiled whole and
// swapped atomically; one that does not compile leaves the previous one in
// force. It is ready once a first configuration is loaded.
type Follower struct {
	cfg       Config
	ready     atomic.Bool
	loaded    chan struct{} // closed with the first configuration
	readyOnce sync.Once

	mu      sync.Mutex // serialises pulls
	current map[string]*sluicev1.Snapshot
	// unsaved has a token when current changed since the state file was
	// last written: the file is written by Run's saver, not by pulls, so
	// that a large state's write neither delays the next change's pull nor
	// happens once per change of a burst.
	unsaved chan struct{}
	configs atomic.Pointer[map[string]*decide.Compiled]
	refused atomic.Int64 // snapshots that did not compile
	live    atomic.Int32 // the live deciders last heard of; 0: none yet
}

// key is the credential to present now.
func (s *Follower) key() string {
	if s.cfg.KeyFunc != nil {
		return s.cfg.KeyFunc()
	}
	return s.cfg.Key
}

// New returns a Follower; Run starts it.
func New(cfg Config) *Follower {
	if cfg.Repull <= 0 {
		cfg.Repull = 30 * time.Second
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Follower{cfg: cfg, current: map[string]*sluicev1.Snapshot{}, loaded: make(chan struct{}), unsaved: make(chan struct{}, 1)}
	s.configs.Store(&map[string]*decide.Compiled{})
	if cfg.Keys != nil { // no key is known before the first configuration: unavailable, not invalid
		cfg.Keys.SetReady(s.Ready)
	}
	return s
}

// Ready reports whether a configuration has been loaded.
func (s *Follower) Ready() bool { return s.ready.Load() }

// Refused counts the tenant snapshots that did not compile (the previous
// one of the tenant, if any, stayed in force): a decider enforcing an
// older config than the control plane holds.
func (s *Follower) Refused() int64 { return s.refused.Load() }

// Loaded is closed once a configuration has been loaded.
func (s *Follower) Loaded() <-chan struct{} { return s.loaded }

// Config returns the enforced config of a tenant, or nil.
func (s *Follower) Config(tenantID string) *decide.Compiled { return (*s.configs.Load())[tenantID] }

// Versions returns the config version enforced for each tenant.
func (s *Follower) Versions() map[string]int64 {
	out := map[string]int64{}
	for id, c := range *s.configs.Load() {
		out[id] = c.Version
	}
	return out
}

// firstPullTimeout bounds the first pull when a state file can stand in:
// a control plane that does not answer (a partition, not a refusal) keeps
// the decider from starting no longer than this.
const firstPullTimeout = 5 * time.Second

// Run syncs until ctx ends. It returns nil then, once the state file
// holds what was pulled.
func (s *Follower) Run(ctx context.Context) error {
	saved := make(chan struct{})
	go s.saver(ctx, saved)
	defer func() { <-saved }()
	first := s.cfg.PullTimeout
	if _, err := os.Stat(s.cfg.StateFile); s.cfg.StateFile != "" && err == nil {
		first = min(first, firstPullTimeout)
	}
	if err := s.pullWithin(ctx, first); err != nil {
		s.cfg.Logger.WarnContext(ctx, "config: control plane unreachable at start", "err", err)
		if err := s.loadState(); err != nil {
			s.cfg.Logger.WarnContext(ctx, "config: no last-known-good snapshot", "err", err)
		}
	}
	events := make(chan struct{}, 1)
	go s.watch(ctx, events)
	tick := time.NewTicker(s.cfg.Repull)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
		case <-tick.C:
		}
		if err := s.pull(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.WarnContext(ctx, "config: pull failed; enforcing the last config", "err", err)
		}
	}
}

// watch follows the control plane's stream and signals events; it
// reconnects (with a pause) until ctx ends. After reconnecting it signals
// once, so anything missed meanwhile is pulled.
func (s *Follower) watch(ctx context.Context, events chan<- struct{}) {
	signal := func() {
		select {
		case events <- struct{}{}:
		default: // a pull is pending already
		}
	}
	for ctx.Err() == nil {
		req := connect.NewRequest(&sluicev1.WatchRequest{Since: s.Versions()})
		req.Header().Set("Authorization", "Bearer "+s.key())
		st, err := s.cfg.Client.Watch(ctx, req)
		if err == nil {
			signal()
			for st.Receive() {
				if m := st.Msg(); m.GetTenantId() == "" && m.GetLiveDeciders() > 0 {
					s.fleet(int(m.GetLiveDeciders()))
					continue
				}
				signal()
			}
			err = st.Err()
			st.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil { // the control plane ended it (a restart): no trouble
			s.cfg.Logger.InfoContext(ctx, "config: the control plane ended the watch; watching again")
		} else {
			s.cfg.Logger.WarnContext(ctx, "config: watch interrupted", "err", err)
		}
		select { // 1–2 s: deciders cut off together (a control plane's restart) come back spread out
		case <-ctx.Done():
		case <-time.After(time.Second + rand.N(time.Second)):
		}
	}
}

// fleet tells OnFleet of live deciders, and keeps their number for the
// state file: a decider started without the control plane takes its share
// from the fleet it last knew.
func (s *Follower) fleet(live int) {
	if s.live.Swap(int32(live)) != int32(live) {
		select {
		case s.unsaved <- struct{}{}:
		default: // a write is due already
		}
	}
	if s.cfg.OnFleet != nil {
		s.cfg.OnFleet(live)
	}
}

// usedKeysPerPull bounds the check keys' uses one pull reports (the
// control plane takes 10,000 and a request of 1 MiB); more wait for the
// next pulls.
const usedKeysPerPull = 10_000

// pull fetches what changed and applies it.
func (s *Follower) pull(ctx context.Context) error { return s.pullWithin(ctx, s.cfg.PullTimeout) }

// pullWithin is pull bounded by timeout.
func (s *Follower) pullWithin(ctx context.Context, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	since, stamps := map[string]int64{}, map[string]int64{}
	for id, snap := range s.current {
		since[id], stamps[id] = snap.GetVersion(), snap.GetStamp()
	}
	used := s.cfg.Keys.TakeUsed(usedKeysPerPull)
	hashes := make([][]byte, len(used))
	for i := range used {
		hashes[i] = used[i][:]
	}
	req := connect.NewRequest(&sluicev1.GetSnapshotsRequest{Since: since, Stamps: stamps, Decider: s.cfg.Name, UsedCheckKeyHashes: hashes})
	if s.cfg.HealthFunc != nil {
		req.Msg.Health = s.cfg.HealthFunc()
	}
	req.Header().Set("Authorization", "Bearer "+s.key())
	res, err := s.cfg.Client.GetSnapshots(ctx, req)
	if err != nil {
		s.cfg.Keys.MarkUsed(used) // reported with the next pull
		return err
	}
	if n := res.Msg.GetLiveDeciders(); n > 0 {
		s.fleet(int(n))
	}
	if len(res.Msg.Snapshots) == 0 && len(res.Msg.DeletedTenantIds) == 0 && s.Ready() {
		return nil
	}
	s.apply(res.Msg.Snapshots, res.Msg.DeletedTenantIds)
	select {
	case s.unsaved <- struct{}{}:
	default: // a write is due already: it takes this change too
	}
	return nil
}

// saver writes the state file whenever current changed, until ctx ends,
// and then once more if it changed since; it closes done when it is
// through. Changes made while it writes are written next, together.
func (s *Follower) saver(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-s.unsaved:
			s.saveState(ctx)
		case <-ctx.Done():
			select {
			case <-s.unsaved:
				s.saveState(ctx)
			default:
			}
			return
		}
	}
}

// apply compiles each snapshot and swaps in the ones that compile. s.mu is held.
func (s *Follower) apply(snaps []*sluicev1.Snapshot, deleted []string) {
	next := map[string]*decide.Compiled{}
	for id, c := range *s.configs.Load() {
		next[id] = c
	}
	for _, p := range snaps {
		snap, keys := protoconv.SnapshotFromProto(p)
		c, err := decide.Compile(snap)
		if err != nil {
			s.refused.Add(1)
			s.cfg.Logger.Error("config: snapshot refused; the previous one stays", "tenant", snap.Tenant.ID, "version", snap.Version, "err", err)
			continue
		}
		if s.cfg.ShadowAll || snap.Tenant.Shadow {
			c.ShadowAll()
		}
		if held := s.current[c.Tenant.ID]; held != nil && (held.GetVersion() > p.GetVersion() || held.GetVersion() == p.GetVersion() && held.GetStamp() != p.GetStamp()) {
			s.cfg.Logger.Warn("config: a tenant's configuration replaced by an earlier one, or another of the same version: the control plane's database went back (a backup restored, a failover to a replica behind), and the changes since are lost",
				"tenant", c.Tenant.ID, "held_version", held.GetVersion(), "version", p.GetVersion())
		}
		next[c.Tenant.ID] = c
		s.current[c.Tenant.ID] = p
		s.cfg.Keys.SetTenant(c.Tenant.ID, keys, c)
	}
	for _, id := range deleted {
		delete(next, id)
		delete(s.current, id)
		s.cfg.Keys.RemoveTenant(id)
	}
	was := *s.configs.Swap(&next)
	s.ready.Store(true)
	s.readyOnce.Do(func() { close(s.loaded) })
	if s.cfg.OnChange != nil {
		for id, old := range was {
			if c := next[id]; c != old {
				s.cfg.OnChange(old, c)
			}
		}
	}
}

// saveState writes the current snapshots, whole (atomicfile). It holds
// s.mu only to list them: snapshots are never changed once pulled.
func (s *Follower) saveState(ctx context.Context) {
	if s.cfg.StateFile == "" {
		return
	}
	state := &sluicev1.GetSnapshotsResponse{LiveDeciders: s.live.Load()}
	s.mu.Lock()
	for _, p := range s.current {
		state.Snapshots = append(state.Snapshots, p)
	}
	s.mu.Unlock()
	b, err := proto.Marshal(state)
	if err == nil {
		err = atomicfile.WriteFile(s.cfg.StateFile, b, 0o600)
	}
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "config: saving the last-known-good snapshot", "err", err)
	}
}

// loadState applies the last-known-good snapshot from disk.
func (s *Follower) loadState() error {
	if s.cfg.StateFile == "" {
		return errors.New("no state file configured")
	}
	b, err := os.ReadFile(s.cfg.StateFile)
	if err != nil {
		return err
	}
	var state sluicev1.GetSnapshotsResponse
	if err := proto.Unmarshal(b, &state); err != nil {
		return fmt.Errorf("config: state file %s: %w", s.cfg.StateFile, err)
	}
	if n := state.GetLiveDeciders(); n > 0 {
		s.fleet(int(n))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(state.Snapshots, nil)
	return nil
}
