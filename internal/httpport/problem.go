package httpport

import (
	"cmp"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Problem is an RFC 9457 problem details body. A protocol with an error
// envelope of its own (Unkey's, grpc-gateway's) wraps the exchange and
// answers each Problem in it.
type Problem struct {
	Type             string              `json:"type"`
	Title            string              `json:"title"`
	Status           int                 `json:"status"`
	Detail           string              `json:"detail"`
	Errors           []policy.FieldError `json:"errors,omitempty"`
	ViolatedPolicies []string            `json:"violated_policies,omitempty"`
	Rules            []RuleJSON          `json:"rules,omitempty"`
	ConfigVersion    int64               `json:"config_version,omitempty"`
	Degraded         string              `json:"degraded,omitempty"`
	// Code is the policy code behind a policy error's answer; CodeUnknown
	// for the transport's own refusals.
	Code policy.Code `json:"-"`
}

// RuleJSON is one rule's answer in a check response.
type RuleJSON struct {
	Rule         string `json:"rule"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow,omitempty"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"` // absent when never admissible
	DelayMS      int64  `json:"delay_ms,omitempty"`
	// Message is, on a rejection, the rule's message for the client.
	Message string `json:"message,omitempty"`
	// Unenforced is set on a degraded decision's rule that nothing
	// counted (it answered open).
	Unenforced bool `json:"unenforced,omitempty"`
}

// RulesJSON is the answer of each of dec's rules.
func RulesJSON(dec decide.Decision) []RuleJSON {
	out := make([]RuleJSON, len(dec.Rules))
	for i, r := range dec.Rules {
		out[i] = RuleJSONOf(r)
		if ms, ok := RetryAfterMS(r); ok {
			out[i].RetryAfterMS = &ms
		}
	}
	return out
}

// RuleJSONOf is r's answer, but for RetryAfterMS (see RetryAfterMS).
func RuleJSONOf(r decide.RuleResult) RuleJSON {
	return RuleJSON{Rule: r.Rule.Name, Allowed: r.Allowed, Shadow: r.Rule.Shadow, Limit: r.Limit,
		Remaining: r.Remaining, ResetAfterMS: CeilMS(r.ResetAfter), DelayMS: CeilMS(r.Delay), Message: decision.RejectionMessage(r), Unenforced: r.Unenforced}
}

// RetryAfterMS is r's retry_after_ms, when it has one: a rejection that a
// later request can pass.
func RetryAfterMS(r decide.RuleResult) (int64, bool) {
	return CeilMS(r.RetryAfter), !r.Allowed && r.RetryAfter != limit.Never
}

// CeilMS is d in whole milliseconds, rounded up.
func CeilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// RejectedProblem is the answer of a rejected decision.
func RejectedProblem(dec decide.Decision) Problem {
	p := Problem{Type: "https://sluice.dev/problems/rate-limited", Title: "Too Many Requests",
		Status: http.StatusTooManyRequests, Rules: RulesJSON(dec), ConfigVersion: dec.Version, Degraded: dec.Degradation.Reason()}
	for _, r := range dec.Rules {
		if !r.Allowed && !r.Rule.Shadow {
			p.ViolatedPolicies = append(p.ViolatedPolicies, r.Rule.Name)
		}
	}
	p.Detail = "rejected by " + strings.Join(p.ViolatedPolicies, ", ")
	if dec.Deciding >= 0 {
		p.Detail = cmp.Or(decision.RejectionMessage(dec.Rules[dec.Deciding]), p.Detail) // the tenant's words, where it has some
	}
	return p
}

// ReplyProblem answers a refusal of the transport's own (a malformed body,
// a method not allowed): status says it, with no policy code behind it.
func ReplyProblem(ex Exchange, status int, title, detail string, fields []policy.FieldError) {
	ex.Reply(status, "application/problem+json", Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Errors: fields})
}

// ReplyCodedProblem answers a policy error of code c, with the status
// policy's table gives it.
func ReplyCodedProblem(ex Exchange, c policy.Code, title, detail string, fields []policy.FieldError) {
	status := c.Status().HTTP
	ex.Reply(status, "application/problem+json", Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Errors: fields, Code: c})
}
