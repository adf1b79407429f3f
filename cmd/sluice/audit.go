package main

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// auditVerbs read what changed and which deciders enforce it.
var auditVerbs = map[string]verb{
	"audit list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		limit := fs.Int("limit", 20, "at most this many entries, newest first (at most 1000)")
		before := fs.Int64("before", 0, "entries older than this id (paging: the last id shown)")
		resource := fs.String("resource", "", "only the history of this resource (a rule's, an override's or a key's id)")
		return func(s *session, c *http.Client, _ string) error {
			req := &sluicev1.ListAuditRequest{TenantId: s.tenant, Limit: int32(min(max(*limit, 1), 1000)), BeforeId: *before, ResourceId: *resource}
			return call(s, sluicev1connect.NewAuditServiceClient(c, s.server).ListAudit, req, func(w *tabwriter.Writer, r *sluicev1.ListAuditResponse) {
				fmt.Fprintln(w, "ID\tAT\tACTOR\tACTION\tRESOURCE\tVERSION\tCHANGES")
				for _, e := range r.Entries {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s %s\t%d\t%s\n", e.Id, when(e.At.IsValid(), e.At.AsTime()), cmp.Or(e.ActorName, e.Actor), e.Action, e.Resource, e.ResourceId, e.ConfigVersion, changesText(e.Changes))
				}
			})
		}
	}},
	"deciders list": plain("", func(s *session, c *http.Client, _ string) error {
		tenants := tenantsByID(s, sluicev1connect.NewTenantServiceClient(c, s.server))
		return call(s, sluicev1connect.NewDeciderServiceClient(c, s.server).ListDeciders, &sluicev1.ListDecidersRequest{}, func(w *tabwriter.Writer, r *sluicev1.ListDecidersResponse) {
			// LATEST is the tenant's version now: a decider whose VERSION is
			// below has not pulled since the tenant changed (cut off from
			// the control plane, or refusing the snapshot).
			fmt.Fprintln(w, "DECIDER\tLAST SYNCED\tTENANT\tVERSION\tLATEST\tREDIS BREAKER\tREDIS ERRORS\tEVENTS WAITING\tEVENTS DROPPED")
			for _, d := range r.Deciders {
				synced := when(d.LastSyncedAt.IsValid(), d.LastSyncedAt.AsTime())
				if d.LastSyncedAt.IsValid() {
					synced += " (" + ago(time.Since(d.LastSyncedAt.AsTime())) + ")"
				}
				h := d.GetHealth()
				health := fmt.Sprintf("%s\t%d\t%d\t%d", cmp.Or(h.GetBreaker(), "-"), h.GetEngineErrors(), h.GetEventsSpooled()+h.GetEventsQueued(), h.GetEventsDropped())
				if len(d.ConfigVersions) == 0 {
					fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t%s\n", d.Name, synced, health)
				}
				for _, id := range slices.Sorted(maps.Keys(d.ConfigVersions)) {
					slug, latest := id, "-"
					if t := tenants[id]; t != nil {
						slug, latest = t.Slug, strconv.FormatInt(t.ConfigVersion, 10)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", d.Name, synced, slug, d.ConfigVersions[id], latest, health)
				}
			}
		})
	}),
}

// changesText is an audit entry's changes on one line: "limit 10→20" for
// a field changed, "name=ci" for one set, "-name" for one unset.
func changesText(changes []*sluicev1.AuditChange) string {
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		switch {
		case c.Old == "":
			parts = append(parts, c.Field+"="+c.New)
		case c.New == "":
			parts = append(parts, "-"+c.Field)
		default:
			parts = append(parts, c.Field+" "+c.Old+"→"+c.New)
		}
	}
	return strings.Join(parts, ", ")
}

func when(ok bool, t time.Time) string {
	if !ok {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ago says roughly how long ago something was, d before now. A decider
// pulls every 30 s by default: one last synced minutes ago has stopped,
// or is cut off from the control plane.
func ago(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%d h ago", int(d.Hours()))
}
