package dataplane

import (
	"context"

	"github.com/sluicehq/sluice/internal/decision"
)

// tracedExchange is decision.Service.TracedHeader for an exchange.
func tracedExchange(cfg *decision.Service, ex exchange) context.Context {
	return cfg.TracedGetter(ex.context(), ex.header)
}
