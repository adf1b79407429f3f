package httpport

import (
	"context"
	"net/http"

	"github.com/valyala/fasthttp"
)

// recoverFast wraps a fasthttp handler: a panic is answered 500 with a
// problem+json body, logged and counted (decision.Service.Recovered).
// fasthttp, unlike net/http, lets a handler's panic end the process.
func recoverFast(a *API, next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer func() {
			if r := recover(); r != nil {
				a.Recovered(context.Background(), "http", r)
				ctx.Response.Reset()
				ReplyProblem(&fastExchange{ctx}, http.StatusInternalServerError, "Internal error", "the decider failed on this request", nil)
			}
		}()
		next(ctx)
	}
}
