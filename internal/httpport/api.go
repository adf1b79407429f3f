package httpport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/policy"
)

// API is the decision service as HTTP check routes use it: the steps each
// route takes before and after deciding, answered alike on every route.
type API struct{ decision.Service }

// NewAPI returns svc's API, its zero settings defaulted.
func NewAPI(svc decision.Service) *API {
	if svc.MaxBodyBytes <= 0 {
		svc.MaxBodyBytes = decision.DefaultMaxBodyBytes
	}
	if svc.Logger == nil {
		svc.Logger = slog.Default()
	}
	return &API{svc}
}

// Begin authenticates the request and decodes its body into v, the body
// of a what ("check", "reset"); on failure it has answered and returns
// false.
func (a *API) Begin(ex Exchange, what string, v any) (*decide.Compiled, bool) {
	c, err := a.Authorize(ex.Authorization(), ex.Peer())
	if err != nil {
		a.Fail(ex, err)
		return nil, false
	}
	if what != "reset" { // a decision: refused at the door while the tenant crowds a full decider
		if err := a.Door(c); err != nil {
			ex.RateHeaders(decision.DoorDecision, a.Headers)
			a.Fail(ex, err)
			return nil, false
		}
	}
	// A compressed body would be read as malformed JSON: say why instead
	// (bodies are a few hundred bytes; nothing is gained by compressing).
	if ce := ex.Header("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		ReplyProblem(ex, http.StatusUnsupportedMediaType, "Unsupported Media Type",
			fmt.Sprintf("the body of a %s is read as it is: Content-Encoding %q is not supported", what, ce), nil)
		return nil, false
	}
	err = ex.Decode(v, a.MaxBodyBytes)
	if err == nil {
		return c, true
	}
	if errors.Is(err, ErrTooLarge) {
		a.TooLarge(ex)
		return nil, false
	}
	ReplyProblem(ex, http.StatusBadRequest, "Malformed request", "the body is not a valid "+what+": "+err.Error(), nil)
	return nil, false
}

// TooLarge answers a body over the bound.
func (a *API) TooLarge(ex Exchange) {
	ReplyProblem(ex, http.StatusRequestEntityTooLarge, "Request too large",
		fmt.Sprintf("the body exceeds %d bytes", a.MaxBodyBytes), nil)
}

// Fail answers err: policy errors with their status and details, anything
// else as an internal error whose text is logged, never sent.
func (a *API) Fail(ex Exchange, err error) {
	if errors.Is(err, context.Canceled) { // the client went away: nothing failed, nobody reads the answer
		a.Logger.Debug("check canceled by the client")
		ReplyProblem(ex, StatusClientClosed, "Client Closed Request", "the request was canceled", nil)
		return
	}
	var pe *policy.Error
	if !errors.As(err, &pe) {
		a.Logger.Error("check failed", "err", err)
		ReplyProblem(ex, http.StatusInternalServerError, "Internal error", "the decision could not be made", nil)
		return
	}
	status := pe.Code.Status().HTTP
	ReplyCodedProblem(ex, pe.Code, http.StatusText(status), pe.Message, pe.Fields)
}

// Traced is the exchange's context with the trace its headers carry
// (decision.Service.TracedHeader).
func (a *API) Traced(ex Exchange) context.Context {
	return a.TracedGetter(ex.Context(), ex.Header)
}

// StatusClientClosed answers a request its client canceled (nginx's 499).
const StatusClientClosed = 499
