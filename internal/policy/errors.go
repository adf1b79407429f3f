package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Code classifies an Error. Each transport answers a Code as its Status
// says (the one table, below); nothing inspects error text.
type Code uint8

// The error codes of the domain.
const (
	CodeUnknown Code = iota
	CodeInvalid
	CodeNotFound
	CodeConflict
	CodeUnauthenticated
	CodePermissionDenied
	CodeUnavailable
	CodeResourceExhausted
	// CodeAborted: a change conditioned on a state that no longer holds
	// (another change came first); read again and retry.
	CodeAborted
	// CodeFailedPrecondition: a change refused in the state things are in
	// (a tier still in use); change that state first.
	CodeFailedPrecondition
	// CodeUnimplemented: a method or encoding the server does not offer.
	CodeUnimplemented
	// CodeCanceled: the caller went away before its answer.
	CodeCanceled
)

// Status is how every transport answers a Code.
type Status struct {
	// RPC is the gRPC status code, which is also the Connect code: the two
	// share their numbers (codes.InvalidArgument = connect.CodeInvalidArgument
	// = 3). A number here keeps the core free of either library.
	RPC uint32
	// HTTP is the HTTP status of the JSON APIs.
	HTTP int
}

// statuses is the one table of answers: every transport reads it through
// Code.Status. A Code outside it is answered as CodeUnknown, an internal
// error.
var statuses = [...]Status{
	CodeUnknown:            {RPC: 13, HTTP: 500}, // Internal
	CodeInvalid:            {RPC: 3, HTTP: 400},  // InvalidArgument
	CodeNotFound:           {RPC: 5, HTTP: 404},  // NotFound
	CodeConflict:           {RPC: 6, HTTP: 409},  // AlreadyExists
	CodeUnauthenticated:    {RPC: 16, HTTP: 401}, // Unauthenticated
	CodePermissionDenied:   {RPC: 7, HTTP: 403},  // PermissionDenied
	CodeUnavailable:        {RPC: 14, HTTP: 503}, // Unavailable
	CodeResourceExhausted:  {RPC: 8, HTTP: 429},  // ResourceExhausted
	CodeAborted:            {RPC: 10, HTTP: 409}, // Aborted
	CodeFailedPrecondition: {RPC: 9, HTTP: 409},  // FailedPrecondition
	CodeUnimplemented:      {RPC: 12, HTTP: 501}, // Unimplemented
	CodeCanceled:           {RPC: 1, HTTP: 499},  // Canceled (nginx's 499: the client closed the request)
}

// CodeOfRPC is the Code whose Status has the gRPC (and Connect) code rpc,
// the first in the table; CodeUnknown for none. It reads an error a
// library made (a Connect error) back into the table's terms.
func CodeOfRPC(rpc uint32) Code {
	for c, s := range statuses {
		if s.RPC == rpc {
			return Code(c)
		}
	}
	return CodeUnknown
}

// Status says how transports answer c.
func (c Code) Status() Status {
	if int(c) < len(statuses) {
		return statuses[c]
	}
	return statuses[CodeUnknown]
}

var codeNames = [...]string{"unknown", "invalid", "not_found", "conflict", "unauthenticated", "permission_denied", "unavailable", "resource_exhausted", "aborted", "failed_precondition", "unimplemented", "canceled"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", c)
}

// FieldError names one invalid field of an input, with a path such as
// "rules[2].match[0].key", and says what is wrong with it. In JSON (the
// decider's problem+json answers) it is {"field", "description"}, the
// names of google.rpc.BadRequest's field violations.
type FieldError struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Error is the one coded error type of the core. Message is safe to show to
// the caller; Fields lists field-level problems for CodeInvalid.
type Error struct {
	Code    Code
	Message string
	Fields  []FieldError
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return e.Message
	}
	var b strings.Builder
	b.WriteString(e.Message)
	b.WriteString(": ")
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Field)
		b.WriteString(": ")
		b.WriteString(f.Description)
	}
	return b.String()
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, policy.ErrNotFound) holds for any not-found error.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Message == "" && len(t.Fields) == 0
}

// Sentinels for errors.Is; they match any *Error of their code.
var (
	ErrInvalid           = &Error{Code: CodeInvalid}
	ErrNotFound          = &Error{Code: CodeNotFound}
	ErrConflict          = &Error{Code: CodeConflict}
	ErrUnauthenticated   = &Error{Code: CodeUnauthenticated}
	ErrPermissionDenied  = &Error{Code: CodePermissionDenied}
	ErrUnavailable       = &Error{Code: CodeUnavailable}
	ErrResourceExhausted = &Error{Code: CodeResourceExhausted}
	ErrAborted           = &Error{Code: CodeAborted}
)

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeUnknown (an internal error whose text must not reach clients).
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnknown
}

// Within returns err as met within an element of a larger input: an
// *Error's message prefixed with what ("files[2] (tenant acme): …") and its
// fields nested under path (files[2].tiers[0].limit), its code kept; any
// other error wrapped with what, its chain kept.
func Within(err error, path, what string) error {
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", what, err)
	}
	out := &Error{Code: e.Code, Message: what + ": " + e.Message}
	for _, f := range e.Fields {
		out.Fields = append(out.Fields, FieldError{Field: joinField(path, f.Field), Description: f.Description})
	}
	return out
}

// fieldErrors collects field-level problems during validation.
type fieldErrors struct {
	prefix string // the path so far
	// elem[idx] ends the path when elem is set: an element's path is
	// rendered only when one of its fields is invalid, so that validating
	// valid input (every decision's descriptors) allocates nothing.
	elem string
	idx  int
	list *[]FieldError
}

func newFieldErrors() fieldErrors { return fieldErrors{list: new([]FieldError)} }

func (fe fieldErrors) path() string {
	if fe.elem == "" {
		return fe.prefix
	}
	return joinField(fe.prefix, fe.elem+"["+strconv.Itoa(fe.idx)+"]")
}

func joinField(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// at returns a collector whose fields are nested under name.
func (fe fieldErrors) at(name string) fieldErrors {
	return fieldErrors{prefix: joinField(fe.path(), name), list: fe.list}
}

// index returns a collector for element i of the list field name.
func (fe fieldErrors) index(name string, i int) fieldErrors {
	return fieldErrors{prefix: fe.path(), elem: name, idx: i, list: fe.list}
}

func (fe fieldErrors) add(field, format string, args ...any) {
	*fe.list = append(*fe.list, FieldError{Field: joinField(fe.path(), field), Description: fmt.Sprintf(format, args...)})
}

// err returns an *Error with CodeInvalid listing the collected fields, or nil.
func (fe fieldErrors) err(what string) error {
	if len(*fe.list) == 0 {
		return nil
	}
	return &Error{Code: CodeInvalid, Message: "invalid " + what, Fields: *fe.list}
}
