// Package unkeywire is the shape of Unkey's API on the wire, which
// Sluice's two parts of it share: the decider's rate limit call (package
// unkey) and the control plane's override calls. Its answer envelope, and
// the bounds of a limit and its duration. It imports nothing of either
// part, so that the control plane links no decider.
package unkeywire

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/sluicehq/sluice/internal/policy"
)

// Answer is the body of every answer of Unkey's API: meta, and data (with
// pagination, for a list) or error.
type Answer[T any] struct {
	Meta       Meta        `json:"meta"`
	Data       *T          `json:"data,omitempty"`
	Pagination *Pagination `json:"pagination,omitempty"`
	Error      *Error      `json:"error,omitempty"`
}

// Meta names an answer.
type Meta struct {
	RequestID string `json:"requestId"`
}

// Pagination tells a list's caller whether more follows, and from where.
type Pagination struct {
	Cursor  string `json:"cursor,omitempty"`
	HasMore bool   `json:"hasMore"`
}

// Error is a problem in Unkey's terms: its fields, and one entry per
// invalid field of the body.
type Error struct {
	Title  string       `json:"title"`
	Detail string       `json:"detail"`
	Status int          `json:"status"`
	Type   string       `json:"type"`
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is an invalid field: its location (body.duration) and what
// is wrong.
type FieldError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
}

// ErrorOf is the Unkey error of a problem: status, title, detail and
// type, with each invalid body field's location.
func ErrorOf(status int, title, detail, typ string, fields []policy.FieldError) *Error {
	e := &Error{Title: title, Detail: detail, Status: status, Type: typ}
	for _, f := range fields {
		e.Errors = append(e.Errors, FieldError{Location: "body." + f.Field, Message: f.Description})
	}
	return e
}

// RequestID names an answer, as Unkey's meta.requestId does.
func RequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// Unkey's bounds, and Sluice's: a duration of 1 s to 30 days, in whole
// seconds (milliseconds in the API); names and identifiers of 1 to 255
// bytes.
const (
	MinDuration = 1000
	MaxDuration = 30 * 24 * 3600 * 1000
	MaxName     = 255
)

// CheckLimit tells bad of a limit and a duration (milliseconds) out of
// bounds, by their fields' names.
func CheckLimit(bad func(field, desc string), limit, duration int64) {
	if limit < 1 || limit > policy.MaxLimit {
		bad("limit", "must be 1 to 1e9")
	}
	switch {
	case duration < MinDuration || duration > MaxDuration:
		bad("duration", "must be 1000 to 2592000000 milliseconds")
	case duration%1000 != 0:
		bad("duration", "must be whole seconds: a multiple of 1000 milliseconds")
	}
}
