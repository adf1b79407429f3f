package policy

import (
	"errors"
	"time"
)

// What a store of configuration gives its users besides the domain
// records: config versions as a watch delivers them, where a page of a
// listing ends, and the errors they must tell apart.

// Version is one committed config version of a tenant, or its deletion.
type Version struct {
	TenantID string
	Version  int64
	Deleted  bool
	// Back marks a tenant found at an earlier version than the watch had
	// delivered (Version, its version now): the database went back to an
	// earlier state, restored from a backup or failed over to a replica
	// the last changes had not reached. Its versions after this one are
	// delivered again as they come, though numbered as the lost ones were.
	Back bool
}

// ErrWatchBehind ends a config watch that fell too far behind the
// changes; the watcher should watch again from the versions it has.
var ErrWatchBehind = errors.New("config watch fell behind; watch again")

// OverrideCursor is where a page of overrides ends: the identifier and id
// of its last override.
type OverrideCursor struct{ Identifier, ID string }

// KeyCursor is where a page of keys ends: its last key's creation time
// and id.
type KeyCursor struct {
	CreatedAt time.Time
	ID        string
}

// ErrPageToken refuses a page token that no page gave.
var ErrPageToken = &Error{Code: CodeInvalid, Message: "invalid page token",
	Fields: []FieldError{{Field: "page_token", Description: "not one this API gave"}}}

// ErrDatabaseUnavailable is a store's answer while its database is unreachable.
var ErrDatabaseUnavailable = &Error{Code: CodeUnavailable, Message: "the database is unavailable; retry later"}
