package decision

import (
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// What every protocol's answer says of a decision's rules, in one place.

// RejectionMessage is r's rule's message for the client when the rule
// rejects (a shadow rule rejects nothing), else "". An admitted decision
// has none (appendCheckJSON writes no message).
func RejectionMessage(r decide.RuleResult) string {
	if r.Allowed || r.Rule.Shadow {
		return ""
	}
	return r.Rule.Message
}

// HeaderRules are dec's rules as package rlheaders needs them.
func HeaderRules(dec decide.Decision) []rlheaders.Rule {
	return AppendHeaderRules(make([]rlheaders.Rule, 0, len(dec.Rules)), dec)
}

// AppendHeaderRules appends dec's rules as package rlheaders needs them to
// dst.
func AppendHeaderRules(dst []rlheaders.Rule, dec decide.Decision) []rlheaders.Rule {
	for _, r := range dec.Rules {
		retry := r.RetryAfter
		if retry == limit.Never {
			retry = -1
		}
		dst = append(dst, rlheaders.Rule{Name: r.Rule.Name, Limit: r.Limit, Remaining: r.Remaining, Quota: Quota(r), Window: r.InForce().Period(),
			ResetAfter: r.ResetAfter, RetryAfter: retry})
	}
	return dst
}

// Quota is r's limit per window, RateLimit-Policy's q (rlheaders.Rule):
// the parameters' limit, but a blocking rule's 0 (it admits nothing).
func Quota(r decide.RuleResult) int64 {
	if r.Rule.Block {
		return 0
	}
	return r.InForce().Limit
}

// DegradedHeader is the response header naming why the shared store did
// not make a decision (decide.Degradation.Reason): store_unavailable or
// overload. It is absent when the store decided.
const DegradedHeader = "Sluice-Degraded"
