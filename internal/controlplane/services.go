package controlplane

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

type overrideServer struct{ *server }

func (s overrideServer) CreateOverride(ctx context.Context, req *connect.Request[sluicev1.CreateOverrideRequest]) (*connect.Response[sluicev1.CreateOverrideResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	o, v, err := s.store.CreateOverride(ctx, principalFrom(ctx).actor(), tenant, protoconv.OverrideFromProto(req.Msg.GetOverride()))
	return reply(ctx, s.server, &sluicev1.CreateOverrideResponse{Override: overrideOut(o), ConfigVersion: v}, err)
}

func (s overrideServer) ListOverrides(ctx context.Context, req *connect.Request[sluicev1.ListOverridesRequest]) (*connect.Response[sluicev1.ListOverridesResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	after, err := pageCursor(req.Msg.GetPageToken())
	if err != nil {
		return reply[sluicev1.ListOverridesResponse](ctx, s.server, nil, err)
	}
	ovs, next, err := s.store.PageOverrides(ctx, tenant, req.Msg.GetIdentifierPrefix(), after, int(req.Msg.GetPageSize()))
	out := &sluicev1.ListOverridesResponse{}
	for _, o := range ovs {
		out.Overrides = append(out.Overrides, overrideOut(o))
	}
	if next != nil {
		out.NextPageToken = pageToken(next.Identifier, next.ID)
	}
	return reply(ctx, s.server, out, err)
}

// pageToken is the next_page_token of a page that ended at parts (a
// listing's sort key and, where that is not unique, an id), for readToken.
func pageToken(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, "\x00")))
}

// readToken reads a page token of n parts that pageToken made ("": none,
// the first page). The parts are text PostgreSQL's can hold (no NUL,
// valid UTF-8), so a token no page gave is invalid_argument, never an
// error of the database's.
func readToken(token string, n int) ([]string, error) {
	if token == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	parts := strings.Split(string(b), "\x00")
	// The decoder skips newlines: only the token pageToken makes is one.
	if err != nil || len(parts) != n || !utf8.Valid(b) || base64.RawURLEncoding.EncodeToString(b) != token {
		return nil, policy.ErrPageToken
	}
	return parts, nil
}

// pageCursor reads a ListOverrides page token: where the page before ended,
// an identifier and an id.
func pageCursor(token string) (*policy.OverrideCursor, error) {
	parts, err := readToken(token, 2)
	if parts == nil {
		return nil, err
	}
	return &policy.OverrideCursor{Identifier: parts[0], ID: parts[1]}, nil
}

// keyCursor reads a ListKeys page token: the creation time and id of the
// key the page before ended at.
func keyCursor(token string) (*policy.KeyCursor, error) {
	parts, err := readToken(token, 2)
	if parts == nil {
		return nil, err
	}
	at, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return nil, policy.ErrPageToken
	}
	return &policy.KeyCursor{CreatedAt: at, ID: parts[1]}, nil
}

func (s overrideServer) UpdateOverride(ctx context.Context, req *connect.Request[sluicev1.UpdateOverrideRequest]) (*connect.Response[sluicev1.UpdateOverrideResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "override.id", req.Msg.GetOverride().GetId())
	if err != nil {
		return nil, err
	}
	o := req.Msg.GetOverride()
	v, err := s.store.UpdateOverride(ctx, principalFrom(ctx).actor(), tenant, protoconv.OverrideFromProto(o), o.GetEtag())
	return reply(ctx, s.server, &sluicev1.UpdateOverrideResponse{ConfigVersion: v}, err)
}

// overrideOut is an override as the API shows it, with its etag.
func overrideOut(o policy.Override) *sluicev1.Override {
	p := protoconv.OverrideToProto(o)
	p.Etag = o.ETag()
	return p
}

func (s overrideServer) DeleteOverride(ctx context.Context, req *connect.Request[sluicev1.DeleteOverrideRequest]) (*connect.Response[sluicev1.DeleteOverrideResponse], error) {
	tenant, err := tenantWith(ctx, req.Msg.GetTenantId(), "override_id", req.Msg.GetOverrideId())
	if err != nil {
		return nil, err
	}
	v, err := s.store.DeleteOverride(ctx, principalFrom(ctx).actor(), tenant, req.Msg.GetOverrideId())
	return reply(ctx, s.server, &sluicev1.DeleteOverrideResponse{ConfigVersion: v}, err)
}

type auditServer struct{ *server }

func (s auditServer) ListAudit(ctx context.Context, req *connect.Request[sluicev1.ListAuditRequest]) (*connect.Response[sluicev1.ListAuditResponse], error) {
	tenant, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	var bad []policy.FieldError
	if req.Msg.GetBeforeId() < 0 {
		bad = append(bad, policy.FieldError{Field: "before_id", Description: "must be 0 (from the newest) or an entry's id"})
	}
	if l := req.Msg.GetLimit(); l < 0 || l > 1000 {
		bad = append(bad, policy.FieldError{Field: "limit", Description: "must be 0 (100) to 1000"})
	}
	if len(bad) > 0 {
		return reply[sluicev1.ListAuditResponse](ctx, s.server, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid audit query", Fields: bad})
	}
	entries, err := s.store.ListAudit(ctx, tenant, req.Msg.GetBeforeId(), int(req.Msg.GetLimit()), req.Msg.GetResourceId())
	out := &sluicev1.ListAuditResponse{}
	for _, a := range entries {
		out.Entries = append(out.Entries, protoconv.AuditToProto(a))
	}
	return reply(ctx, s.server, out, err)
}

type configServer struct{ *server }

// GetSnapshots answers a decider with the snapshots of the tenants it
// holds an older version of, or none of, or the same version with another
// stamp (a configuration the database lost); a decider that signs in with
// a tenant's check key is answered about that tenant only, and also when
// it holds a later version than the database (see resync).
func (s configServer) GetSnapshots(ctx context.Context, req *connect.Request[sluicev1.GetSnapshotsRequest]) (*connect.Response[sluicev1.GetSnapshotsResponse], error) {
	versions, stamps, err := s.store.TenantVersions(ctx)
	if err != nil {
		return reply[sluicev1.GetSnapshotsResponse](ctx, s.server, nil, err)
	}
	since, name, scope := req.Msg.GetSince(), req.Msg.GetDecider(), principalFrom(ctx).TenantID
	if scope != "" {
		versions, since = onlyTenant(versions, scope), onlyTenant(since, scope)
		if name != "" {
			name += " [tenant " + scope + "]" // its own row: a tenant's key cannot pass for another decider
		}
	}
	if err := s.resync(ctx, scope, name, since, versions); err != nil {
		return reply[sluicev1.GetSnapshotsResponse](ctx, s.server, nil, err)
	}
	out := &sluicev1.GetSnapshotsResponse{}
	for id := range since {
		if _, ok := versions[id]; !ok {
			out.DeletedTenantIds = append(out.DeletedTenantIds, id)
			s.snapshots.forget(id)
		}
	}
	for id, v := range versions {
		// A tenant's decider (a check key's) holding a later version than
		// the database's is sent the database's: it may not raise the
		// version (resync), and would otherwise keep the lost
		// configuration until the tenant's changes passed its version.
		have, ok := since[id]
		if ok && (have == v && sameStamp(req.Msg.GetStamps()[id], stamps[id]) || have > v && scope == "") {
			continue
		}
		if ok && have >= v { // in place of a configuration the database lost
			s.metrics.wentBack.Inc()
		}
		source := "cache"
		snap, err := s.snapshots.get(ctx, id, v, stamps[id], func(ctx context.Context) (*sluicev1.Snapshot, error) {
			source = "database" // the pull whose read others share counts it
			snap, keys, err := s.store.Snapshot(ctx, id)
			if err != nil {
				return nil, err
			}
			return protoconv.SnapshotToProto(snap, keys), nil
		})
		if policy.ErrorCode(err) == policy.CodeNotFound {
			out.DeletedTenantIds = append(out.DeletedTenantIds, id) // deleted since the list
			s.snapshots.forget(id)
			continue
		}
		if err != nil {
			return reply[sluicev1.GetSnapshotsResponse](ctx, s.server, nil, err)
		}
		s.metrics.snapshots.WithLabelValues(source).Inc()
		out.Snapshots = append(out.Snapshots, snap)
	}
	if name != "" {
		// What the decider enforces once it applies this answer.
		enforced := map[string]int64{}
		for id, v := range since {
			if _, ok := versions[id]; ok {
				enforced[id] = v
			}
		}
		for _, snap := range out.Snapshots {
			enforced[snap.GetTenant().GetId()] = snap.GetVersion()
		}
		if err := s.store.RecordDecider(ctx, name, enforced, healthFromProto(req.Msg.GetHealth())); err != nil {
			s.logger.WarnContext(ctx, "recording a decider's sync", "decider", name, "err", err)
		}
		s.fleet.forget() // it may be new: counted now, and by the others' watches
		out.LiveDeciders = int32(s.fleet.live(ctx))
	}
	if err := s.store.TouchCheckKeys(ctx, req.Msg.GetUsedCheckKeyHashes()); err != nil {
		s.logger.WarnContext(ctx, "recording check keys' use", "decider", req.Msg.GetDecider(), "err", err)
	}
	return connect.NewResponse(out), nil
}

// resync raises, in the store and in versions, the config version of each
// tenant whose version the decider name holds (since) is later than the
// database's: the database went back to an earlier state (a backup
// restored, a failover to a replica behind), and without the raise the
// deciders would keep the lost configuration (see
// pgstore.Store.RaiseVersions). Only the decider credential's calls
// resync, not those scoped to a tenant: a tenant's check key, which
// applications hold, could otherwise bump its tenant's version at will,
// each bump a snapshot for every decider to pull.
func (s configServer) resync(ctx context.Context, scope, name string, since, versions map[string]int64) error {
	if scope != "" {
		return nil
	}
	behind := map[string]int64{}
	for id, have := range since {
		if v, ok := versions[id]; ok && have > v && have-v <= maxResync {
			behind[id] = have
		}
	}
	if len(behind) == 0 {
		return nil
	}
	raised, err := s.store.RaiseVersions(ctx, "decider", behind)
	for id, v := range raised {
		versions[id] = v
		s.metrics.wentBack.Inc()
		s.logger.WarnContext(ctx, "a decider enforces a later config version than the database holds (restored from a backup?): the tenant's version is raised past it, and the database's configuration goes to every decider",
			"tenant", id, "decider", name, "decider_version", behind[id], "version", v)
	}
	return err
}

// sameStamp reports whether a decider's stamp of a version (0: a decider
// or a snapshot from before stamps, which knows none) is the database's.
func sameStamp(held, db int64) bool { return held == 0 || held == db }

// maxResync bounds how far past the database's version resync raises a
// tenant's: a database that went back loses at most its recent changes,
// while a decider credential or check key claiming any version could
// otherwise push a tenant's to the end of int64 and over it.
const maxResync = 1 << 20

// onlyTenant returns the entry of m for tenant, alone.
func onlyTenant(m map[string]int64, tenant string) map[string]int64 {
	out := map[string]int64{}
	if v, ok := m[tenant]; ok {
		out[tenant] = v
	}
	return out
}

// What a decider may report of regions: a name's bytes, and how many
// silent regions.
const maxRegionLen, maxSilentRegions = 64, 16

// healthFromProto converts what a decider reports of itself, its breaker
// named only when it is one of the three states.
func healthFromProto(m *sluicev1.DeciderHealth) policy.DeciderHealth {
	h := policy.DeciderHealth{EngineErrors: m.GetEngineErrors(), EventsSpooled: m.GetEventsSpooled(),
		EventsQueued: m.GetEventsQueued(), EventsDropped: m.GetEventsDropped(), Region: policy.FitValue(m.GetRegion(), maxRegionLen)}
	for _, r := range m.GetSilentRegions()[:min(len(m.GetSilentRegions()), maxSilentRegions)] {
		h.SilentRegions = append(h.SilentRegions, policy.FitValue(r, maxRegionLen))
	}
	switch b := m.GetBreaker(); b {
	case "closed", "half-open", "open":
		h.Breaker = b
	}
	return h
}

// sendFleet sends stream the number of live deciders each time it
// changes, until ctx ends: each decider's share of a limit it enforces
// alone follows the fleet within about fleetEvery.
func (s configServer) sendFleet(ctx context.Context, stream *connect.ServerStream[sluicev1.WatchResponse], sending *sync.Mutex) {
	tick := time.NewTicker(fleetEvery)
	defer tick.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n := s.fleet.live(ctx)
		if n == sent || n == 0 {
			continue
		}
		sending.Lock()
		err := stream.Send(&sluicev1.WatchResponse{LiveDeciders: int32(n)})
		sending.Unlock()
		if err != nil {
			return
		}
		sent = n
	}
}

type deciderServer struct{ *server }

func (s deciderServer) ListDeciders(ctx context.Context, _ *connect.Request[sluicev1.ListDecidersRequest]) (*connect.Response[sluicev1.ListDecidersResponse], error) {
	ds, err := s.store.ListDeciders(ctx)
	out := &sluicev1.ListDecidersResponse{}
	for _, d := range ds {
		h := d.Health
		out.Deciders = append(out.Deciders, &sluicev1.Decider{Name: d.Name, LastSyncedAt: timestamppb.New(d.LastSyncedAt), ConfigVersions: d.Versions,
			Health: &sluicev1.DeciderHealth{Breaker: h.Breaker, EngineErrors: h.EngineErrors, EventsSpooled: h.EventsSpooled,
				EventsQueued: h.EventsQueued, EventsDropped: h.EventsDropped, Region: h.Region, SilentRegions: h.SilentRegions}})
	}
	return reply(ctx, s.server, out, err)
}

func (s configServer) Watch(ctx context.Context, req *connect.Request[sluicev1.WatchRequest], stream *connect.ServerStream[sluicev1.WatchResponse]) error {
	if err := protoconv.DecodeError(req.Msg); err != nil { // streams pass no unary interceptor
		return protoconv.ToConnectError(ctx, s.logger, err)
	}
	if s.closing != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	scope := principalFrom(ctx).TenantID // a tenant's check key watches that tenant only
	since := req.Msg.GetSince()
	if scope != "" {
		since = onlyTenant(since, scope)
	}
	// A decider watching again after the database went back learns of the
	// raised versions at once, not at its next pull (see resync). A
	// tenant's decider, which may not raise them, is told of the tenant's
	// version now (policy.Version.Back) and of its changes from there on
	// (GetSnapshots then sends it the database's configuration).
	if len(since) > 0 && scope == "" {
		versions, _, err := s.store.TenantVersions(ctx)
		if err == nil {
			err = s.resync(ctx, scope, "", since, versions)
		}
		if err != nil {
			s.logger.WarnContext(ctx, "comparing a watching decider's config versions with the database's", "err", err)
		}
	}
	// Send the headers now: the client's call returns when the watch is
	// established, not at the first change.
	if err := stream.Send(nil); err != nil {
		return err
	}
	var sending sync.Mutex // the watch's emit and the fleet's
	if scope == "" {       // a tenant's decider serves that tenant alone, apart from the fleet
		fctx, stopFleet := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.sendFleet(fctx, stream, &sending); close(done) }()
		defer func() { stopFleet(); <-done }() // no Send once the handler returns
	}
	err := s.watches.Watch(ctx, since, func(v policy.Version) error {
		if scope != "" && v.TenantID != scope {
			return nil
		}
		sending.Lock()
		defer sending.Unlock()
		return stream.Send(&sluicev1.WatchResponse{TenantId: v.TenantID, Version: v.Version, Deleted: v.Deleted})
	})
	if ctx.Err() != nil {
		return nil // the decider hung up, or the server is closing
	}
	if errors.Is(err, policy.ErrWatchBehind) {
		return protoconv.Error(policy.CodeUnavailable, err.Error()) // the decider watches again, from what it has
	}
	return err
}
