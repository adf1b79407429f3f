package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/unkeywire"
)

// Unkey's override calls (API v2), for applications that manage their
// overrides through Unkey's SDK: POST /v2/ratelimit.setOverride,
// getOverride, listOverrides and deleteOverride, with a tenant's admin
// key (a viewer key gets and lists). An override is a rule of the
// tenant's default tier matching namespace=N and identifier=I (each '*' of
// I a wildcard, as Unkey's), keyed by identifier, a sliding window of the
// override's limit per duration: the decider's ratelimit.limit decides a
// call it matches by it, in place of the call's own limit. The rule is
// the console's and the CLI's too; overrideId is its id.
const unkeyPrefix = "/v2/ratelimit."

// unkeyOps are the override calls, by name; view marks those a viewer key
// may make.
var unkeyOps = map[string]struct {
	view bool
	do   func(s *server, ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error)
}{
	"setOverride":    {false, (*server).unkeySet},
	"getOverride":    {true, (*server).unkeyGet},
	"listOverrides":  {true, (*server).unkeyList},
	"deleteOverride": {false, (*server).unkeyDelete},
}

func init() {
	for name, op := range unkeyOps {
		if op.view {
			viewable[unkeyPrefix+name] = true
		}
	}
}

// unkeyOverrideBody is the body of every override call, each reading the
// fields it needs.
type unkeyOverrideBody struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
	// Cursor (listOverrides) is the overrideId the page starts after.
	Cursor string `json:"cursor"`
}

// unkeyOverride is an override as Unkey answers it.
type unkeyOverride struct {
	OverrideID string `json:"overrideId"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
}

// unkeyPage is the most overrides a listOverrides answer holds.
const unkeyPage = 100

// unkeyHandler serves the override calls (POST /v2/{call}): each
// authenticated and authorized as a Connect call of its name is.
func (s *server) unkeyHandler(auth *authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.PathValue("call"), "ratelimit.")
		op, known := unkeyOps[name]
		if !ok || !known {
			unkeyFail(w, policy.Errorf(policy.CodeNotFound, "no such call: %s", r.URL.Path))
			return
		}
		start, procedure := time.Now(), unkeyPrefix+name
		data, page, err := s.unkeyCall(r, auth, name, op.do)
		s.metrics.seconds.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
		code := "ok"
		if err != nil {
			code = unkeyCode(err).String()
		}
		s.metrics.calls.WithLabelValues(procedure, code).Inc()
		if err != nil {
			unkeyFail(w, err)
			return
		}
		unkeyReply(w, http.StatusOK, &data, page, nil)
	})
}

// unkeyCall makes override call name of r: its key authorized as a
// Connect call of the name is, its body read, then do.
func (s *server) unkeyCall(r *http.Request, auth *authenticator, name string,
	do func(s *server, ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error)) (any, *unkeywire.Pagination, error) {
	ctx, err := auth.authorize(r.Context(), unkeyPrefix+name, r.Header, r.RemoteAddr)
	if err != nil {
		return nil, nil, err
	}
	if principalFrom(ctx).Role == RoleOperator {
		return nil, nil, policy.Errorf(policy.CodePermissionDenied, "the override calls take the tenant's admin key: the operator key names no tenant")
	}
	tenant, err := tenantOf(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	var b unkeyOverrideBody
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, nil, &policy.Error{Code: policy.CodeInvalid, Message: "the body is not a valid " + name + " request: " + err.Error()}
	}
	return do(s, ctx, tenant, &b)
}

func unkeyReply[T any](w http.ResponseWriter, status int, data *T, page *unkeywire.Pagination, e *unkeywire.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(unkeywire.Answer[T]{Meta: unkeywire.Meta{RequestID: unkeywire.RequestID()}, Data: data, Pagination: page, Error: e})
}

// unkeyCode is the code of err, a Connect or policy error, in the one
// table's terms.
func unkeyCode(err error) policy.Code {
	var pe *policy.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return policy.CodeOfRPC(uint32(connect.CodeOf(err))) // Unknown is in no table: CodeUnknown
}

// unkeyFail answers err, a Connect or policy error, in Unkey's envelope:
// its status from the one table, its title the status's text and its type
// the title in snake case (not_found).
func unkeyFail(w http.ResponseWriter, err error) {
	var fields []policy.FieldError
	var pe *policy.Error
	if errors.As(err, &pe) {
		fields = pe.Fields
	}
	code := unkeyCode(err)
	status := code.Status().HTTP
	title := http.StatusText(status)
	detail := "the control plane failed; its log says why"
	if code != policy.CodeUnknown {
		var ce *connect.Error
		if detail = err.Error(); errors.As(err, &ce) {
			detail = ce.Message()
		} else if pe != nil {
			detail = pe.Message
		}
	}
	unkeyReply[any](w, status, nil, nil, unkeywire.ErrorOf(status, title, detail, strings.ToLower(strings.ReplaceAll(title, " ", "_")), fields))
}

// overrideTier is the tenant's default tier, the one Unkey's calls meet.
func (s *server) overrideTier(ctx context.Context, tenant string) (policy.Tier, error) {
	t, _, err := s.store.GetTenant(ctx, tenant)
	if err != nil {
		return policy.Tier{}, err
	}
	tiers, err := s.store.ListTiers(ctx, tenant)
	if err != nil {
		return policy.Tier{}, err
	}
	for _, tier := range tiers {
		if tier.Name == t.DefaultTier {
			return tier, nil
		}
	}
	return policy.Tier{}, policy.Errorf(policy.CodeFailedPrecondition, "the tenant has no default tier %s", t.DefaultTier)
}

// checkNames refuses a body without its namespace and, unless listing,
// identifier (whose '*', as in Unkey, is a wildcard: user_*, *@example.com).
func (b *unkeyOverrideBody) checkNames(identifier bool) error {
	var fields []policy.FieldError
	bad := func(field, desc string) { fields = append(fields, policy.FieldError{Field: field, Description: desc}) }
	names := map[string]string{"namespace": b.Namespace}
	if identifier {
		names["identifier"] = b.Identifier
	}
	for _, f := range []string{"namespace", "identifier"} {
		if v, ok := names[f]; ok && (v == "" || len(v) > unkeywire.MaxName || strings.IndexByte(v, 0) >= 0) {
			bad(f, fmt.Sprintf("must be 1 to %d bytes, without NUL", unkeywire.MaxName))
		}
	}
	if fields != nil {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid override", Fields: fields}
	}
	return nil
}

// overrideOf returns the rule of tier that is the override of namespace
// and identifier: matching those two alone, keyed by identifier.
func overrideOf(tier policy.Tier, namespace, identifier string) (policy.Rule, bool) {
	for _, r := range tier.Rules {
		if isOverride(r, namespace) && slices.Contains(r.Match, policy.Match{Key: "identifier", Value: identifier}) {
			return r, true
		}
	}
	return policy.Rule{}, false
}

// isOverride reports whether r is an override of namespace: it matches
// namespace=namespace and one identifier, and counts per identifier.
func isOverride(r policy.Rule, namespace string) bool {
	return len(r.Match) == 2 && slices.Equal(r.KeyBy, []string{"identifier"}) &&
		slices.Contains(r.Match, policy.Match{Key: "namespace", Value: namespace}) &&
		slices.ContainsFunc(r.Match, func(m policy.Match) bool { return m.Key == "identifier" })
}

func unkeyOverrideOf(r policy.Rule) unkeyOverride {
	o := unkeyOverride{OverrideID: r.ID, Limit: r.Limit, Duration: r.Window.Milliseconds()}
	for _, m := range r.Match {
		if m.Key == "identifier" {
			o.Identifier = m.Value
		}
	}
	return o
}

func (s *server) unkeySet(ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error) {
	err := b.checkNames(true)
	var fields []policy.FieldError
	unkeywire.CheckLimit(func(field, desc string) { fields = append(fields, policy.FieldError{Field: field, Description: desc}) }, b.Limit, b.Duration)
	var pe *policy.Error
	if errors.As(err, &pe) {
		fields = append(pe.Fields, fields...)
	}
	if fields != nil {
		return nil, nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid override", Fields: fields}
	}
	actor := principalFrom(ctx).actor()
	params := policy.Params{Algorithm: policy.SlidingWindow, Limit: b.Limit, Window: time.Duration(b.Duration) * time.Millisecond}
	sum := sha256.Sum256([]byte(b.Namespace + "\x00" + b.Identifier))
	// An upsert: when another call creates the override between the read
	// and the create (the rule's name is taken), read again and update it.
	for attempt := 1; ; attempt++ {
		tier, err := s.overrideTier(ctx, tenant)
		if err != nil {
			return nil, nil, err
		}
		if r, ok := overrideOf(tier, b.Namespace, b.Identifier); ok {
			r.Params, r.Enabled = params, true
			if _, err := s.store.UpdateRule(ctx, actor, tenant, r, ""); err != nil {
				return nil, nil, err
			}
			return map[string]string{"overrideId": r.ID}, nil, nil
		}
		r, _, err := s.store.CreateRule(ctx, actor, tenant, tier.ID, policy.Rule{
			Name:    "unkey-override-" + hex.EncodeToString(sum[:8]),
			Match:   []policy.Match{{Key: "namespace", Value: b.Namespace}, {Key: "identifier", Value: b.Identifier}},
			KeyBy:   []string{"identifier"},
			Params:  params,
			Enabled: true,
		})
		switch {
		case err == nil:
			return map[string]string{"overrideId": r.ID}, nil, nil
		case !errors.Is(err, policy.ErrConflict) || attempt == 3:
			return nil, nil, err
		}
	}
}

func (s *server) unkeyGet(ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error) {
	r, err := s.findOverride(ctx, tenant, b)
	if err != nil {
		return nil, nil, err
	}
	return unkeyOverrideOf(r), nil, nil
}

// findOverride returns the override b names, or a NotFound error.
func (s *server) findOverride(ctx context.Context, tenant string, b *unkeyOverrideBody) (policy.Rule, error) {
	if err := b.checkNames(true); err != nil {
		return policy.Rule{}, err
	}
	tier, err := s.overrideTier(ctx, tenant)
	if err != nil {
		return policy.Rule{}, err
	}
	r, ok := overrideOf(tier, b.Namespace, b.Identifier)
	if !ok {
		return policy.Rule{}, policy.Errorf(policy.CodeNotFound, "no override of %q in namespace %q", b.Identifier, b.Namespace)
	}
	return r, nil
}

func (s *server) unkeyList(ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error) {
	if err := b.checkNames(false); err != nil {
		return nil, nil, err
	}
	tier, err := s.overrideTier(ctx, tenant)
	if err != nil {
		return nil, nil, err
	}
	out, started := []unkeyOverride{}, b.Cursor == ""
	page := &unkeywire.Pagination{}
	for _, r := range tier.Rules {
		switch {
		case !isOverride(r, b.Namespace):
		case !started:
			started = r.ID == b.Cursor
		case len(out) == unkeyPage:
			page.HasMore, page.Cursor = true, out[len(out)-1].OverrideID
		default:
			out = append(out, unkeyOverrideOf(r))
		}
	}
	return out, page, nil
}

func (s *server) unkeyDelete(ctx context.Context, tenant string, b *unkeyOverrideBody) (any, *unkeywire.Pagination, error) {
	r, err := s.findOverride(ctx, tenant, b)
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.store.DeleteRule(ctx, principalFrom(ctx).actor(), tenant, r.ID); err != nil {
		return nil, nil, err
	}
	return struct{}{}, nil, nil
}
