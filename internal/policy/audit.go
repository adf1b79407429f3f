package policy

import (
	"encoding/json"
	"time"
)

// AuditEntry is one row of a tenant's audit log: who changed what, and
// the resource before and after, as JSON in the API's names.
type AuditEntry struct {
	ID         int64
	Actor      string
	ActorName  string // a key's name and prefix, when the actor is a key
	Action     string
	Resource   string
	ResourceID string
	Old, New   json.RawMessage
	Version    int64
	At         time.Time
}
