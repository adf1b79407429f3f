package sluiceclient

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// FailureMode says what Check answers when the decider cannot.
type FailureMode uint8

const (
	FailOpen   FailureMode = iota // allow: availability over enforcement (the default)
	FailClosed                    // reject: enforcement over availability
)

// Request is one check: the request's descriptors, and optionally the
// tier to apply, the cost (0 means 1) and, for concurrency rules, the
// name of the lease the check takes (retaking a held lease renews it;
// "" takes a new one, which Decision.Lease names). Peek asks without
// consuming whether the request would be admitted now.
type Request struct {
	Tier        string
	Descriptors map[string]string
	Cost        int64
	Lease       string
	Peek        bool
	// Limit, when set, decides the request by this limit alone, in place of
	// the tier's rules: a limit the application sets in code, counted per
	// the values of all the descriptors.
	Limit *Limit
}

// Limit is a request's own limit: Requests per Window (whole seconds),
// counted by Algorithm.
type Limit struct {
	Requests int64
	Window   time.Duration
	// Algorithm counts the limit; the zero value is FixedWindow.
	Algorithm Algorithm
}

// Algorithm is what counts a request's own Limit.
type Algorithm int32

const (
	// FixedWindow counts per window aligned on the Unix epoch, as Envoy's
	// limits are: up to Requests at once at a window's start.
	FixedWindow = Algorithm(sluicev1.Algorithm_ALGORITHM_FIXED_WINDOW)
	// SlidingWindow weights the previous fixed window by its overlap with
	// the sliding one: no burst of twice the limit across a boundary.
	SlidingWindow = Algorithm(sluicev1.Algorithm_ALGORITHM_SLIDING_WINDOW)
	// TokenBucket refills Requests per Window, up to Requests.
	TokenBucket = Algorithm(sluicev1.Algorithm_ALGORITHM_TOKEN_BUCKET)
	// GCRA admits at an even pace with a burst of Requests.
	GCRA = Algorithm(sluicev1.Algorithm_ALGORITHM_GCRA)
)

// Rule is one rule's answer within a decision.
type Rule struct {
	ID, Name        string
	Allowed, Shadow bool
	// Limit is the most a request can find, which Remaining counts down
	// from; Quota is the rule's limit per Window, its rate (a token
	// bucket's burst may be above it, a leaky bucket's queue below).
	Limit, Remaining, Quota int64
	Window                  time.Duration
	ResetAfter, Delay       time.Duration
	// RetryAfter is, on a rejection, when the same request would be
	// admitted; negative when it never can be.
	RetryAfter time.Duration
	// Message is, on a rejection, what the rule's tenant tells the client
	// ("" when the rule has no message).
	Message string
}

// Decision is the answer to a Request.
type Decision struct {
	Allowed bool
	// Deciding indexes Rules: the rule that denied, or the most
	// restrictive; -1 when no rule applied.
	Deciding int
	Rules    []Rule
	// Cached is set when the deny cache answered, without a call.
	Cached bool
	// Failed is set when the decider could not answer and the failure
	// mode did; Check then also returns the error.
	Failed        bool
	ConfigVersion int64
	// Lease names the lease an admitted request holds on the concurrency
	// rules it met ("" when it met none): end it with Release once the
	// work it guards is done, or it ends at the rule's lease TTL.
	Lease string
}

// Delay is how long the request should wait before it goes on: the
// longest Delay of the rules (a leaky bucket as a queue admits a request
// for its turn, later); 0 for most decisions.
func (d Decision) Delay() time.Duration {
	var longest time.Duration
	for _, r := range d.Rules {
		longest = max(longest, r.Delay)
	}
	return longest
}

// RetryAfter is how long until the deciding rule would admit the request
// again: 0 when allowed, negative when never.
func (d Decision) RetryAfter() time.Duration {
	if d.Allowed || d.Deciding < 0 {
		return 0
	}
	return d.Rules[d.Deciding].RetryAfter
}

func toProto(r Request) *sluicev1.CheckRequest {
	m := &sluicev1.CheckRequest{Tier: r.Tier, Cost: r.Cost, Lease: r.Lease, Peek: r.Peek}
	if r.Limit != nil {
		m.Limit = &sluicev1.RequestLimit{Requests: r.Limit.Requests, Window: durationpb.New(r.Limit.Window), Algorithm: sluicev1.Algorithm(r.Limit.Algorithm)}
	}
	keys := make([]string, 0, len(r.Descriptors))
	for k := range r.Descriptors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		m.Descriptors = append(m.Descriptors, &sluicev1.Descriptor{Key: k, Value: r.Descriptors[k]})
	}
	return m
}

func fromProto(m *sluicev1.CheckResponse) Decision {
	d := Decision{Allowed: m.Allowed, Deciding: int(m.Deciding), ConfigVersion: m.ConfigVersion, Lease: m.Lease}
	if len(m.Rules) == 0 {
		d.Deciding = -1
	}
	for _, r := range m.Rules {
		retry := time.Duration(-1)
		if r.RetryAfter != nil {
			retry = r.RetryAfter.AsDuration()
		}
		if r.Allowed {
			retry = 0
		}
		d.Rules = append(d.Rules, Rule{ID: r.RuleId, Name: r.RuleName, Allowed: r.Allowed, Shadow: r.Shadow, Limit: r.Limit,
			Remaining: r.Remaining, Window: r.Window.AsDuration(), ResetAfter: r.ResetAfter.AsDuration(), Delay: r.Delay.AsDuration(),
			RetryAfter: retry, Message: r.Message, Quota: r.Quota})
	}
	return d
}
