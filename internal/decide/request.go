package decide

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Request is one check.
type Request struct {
	// Tier to apply; empty means the client's override tier, else the
	// tenant's default tier.
	Tier        string
	Descriptors policy.Descriptors
	Cost        int64 // 0 means 1
	// Lease is the id of the lease a concurrency rule the request meets
	// takes (retaking a held one renews it). 0 asks for a new lease of the
	// decider's choosing, which Decision.Lease gives: each check naming none
	// holds its own until released or its TTL ends.
	Lease int64
	// Peek asks without consuming whether a request of Cost would be
	// admitted now: each rule is evaluated at a cost of 0 and answers with
	// its remaining and reset as they stand, allowed when its remaining
	// covers Cost. A rule that would reject gives its reset as the
	// retry-after, the latest time it can take to admit.
	Peek bool
	// Limit, when set, decides the request by this limit alone, in place
	// of its tier's rules and overrides (Envoy's per-descriptor limit
	// override): counted per the values of all the request's descriptors,
	// failing open.
	Limit *RequestLimit
	// Replaced names rules that do not apply to this request: rules the
	// other requests of the same call replace (Rule.Replaces), as
	// Decider.Replacing tells.
	Replaced map[string]bool
	// Latency and Outcome, on a release, are how the request the lease
	// guarded went: the samples adaptive concurrency rules learn from.
	// A release giving no latency and succeeded is no sample.
	Latency time.Duration
	Outcome adaptive.Outcome
}

// RequestLimit is a limit a request brings with it: Requests per Window.
type RequestLimit struct {
	Requests int64
	Window   time.Duration
	// Algorithm counts it: policy.FixedWindow (as Envoy's limits are
	// counted; the zero value means it), SlidingWindow, TokenBucket or GCRA
	// (those two with a burst of Requests), as gubernator's and Unkey's
	// per-request limits choose theirs.
	Algorithm policy.Algorithm
	// Calendar, with the fixed window, counts per calendar day, week,
	// month or year in UTC in place of Window (gubernator's
	// DURATION_IS_GREGORIAN).
	Calendar policy.Calendar
	// OverriddenBy, when set, names a descriptor: the tier's rules that
	// match the request with a condition on it decide the request in place
	// of this limit, they alone (Unkey's overrides: a rule matching
	// namespace=api and identifier=user_* gives those identifiers a limit
	// of the tenant's). Without such a rule, the limit decides.
	OverriddenBy string
}

// RequestLimitAlgorithms are the algorithms a request's own limit may
// name: those with no parameter but a limit and a window.
var RequestLimitAlgorithms = []policy.Algorithm{policy.FixedWindow, policy.SlidingWindow, policy.TokenBucket, policy.GCRA}

// ParseRequestLimitAlgorithm returns the algorithm of a request's own
// limit named name ("": the fixed window), or the field error of a name
// that is not one of RequestLimitAlgorithms.
func ParseRequestLimitAlgorithm(name string) (policy.Algorithm, error) {
	if name == "" {
		return policy.FixedWindow, nil
	}
	a, err := policy.ParseAlgorithm(name)
	if err != nil || !slices.Contains(RequestLimitAlgorithms, a) {
		return policy.AlgorithmUnspecified, badRequestLimitAlgorithm()
	}
	return a, nil
}

func badRequestLimitAlgorithm() error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid check", Fields: []policy.FieldError{{Field: "limit.algorithm",
		Description: "must be fixed_window, sliding_window, token_bucket or gcra"}}}
}

// normal is l with its algorithm named.
func (l RequestLimit) normal() RequestLimit {
	if l.Algorithm == policy.AlgorithmUnspecified {
		l.Algorithm = policy.FixedWindow
	}
	return l
}

// RuleResult is one rule's answer within a decision.
type RuleResult struct {
	Rule *policy.Rule // points into the immutable Compiled
	Key  string       // the counter key the rule counted under
	// Params are the parameters that decided: an override's for this
	// client, else the rule's own (nil says the rule's own too).
	Params *policy.Params
	limit.Result
	// Unenforced is set on a degraded decision's rule that nothing counted
	// (answered open): its Remaining is its capacity, not a count.
	Unenforced bool
}

// InForce returns the parameters that decided (RuleResult.Params): what
// a client is told of its limit and window.
func (r *RuleResult) InForce() *policy.Params {
	if r.Params != nil {
		return r.Params
	}
	return &r.Rule.Params
}

// Decision is the answer to a Request.
type Decision struct {
	Allowed bool
	// Degraded is set when the counters did not decide: they failed (or a
	// breaker was open) and each rule answered by its failure mode, or
	// overload kept the decision from it and the overload policy answered.
	// Degradation says which.
	Degraded    bool
	Degradation Degradation
	// Deciding indexes Rules: the rule that denied, or the most restrictive
	// one when allowed; -1 when no enforced rule applied.
	Deciding int
	Rules    []RuleResult
	Tier     string
	Version  int64 // the config version enforced
	// Cached is set when the deny cache answered: Rules then holds only
	// the rule that denied.
	Cached bool
	// Lease is the lease the request holds on its concurrency rules when
	// admitted (Request.Lease, or the decider's new one), to be ended by
	// Release; 0 when it took none.
	Lease int64
}
