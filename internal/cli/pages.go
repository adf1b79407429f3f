package cli

import (
	"context"

	"connectrpc.com/connect"
)

// AllPages turns a paged List call into one over every page: it follows
// next_page_token from the request's page (setToken puts a token in a
// request) to the last, and answers what merge gathered of each page into
// an empty response.
func AllPages[Req, Res any, PRes interface {
	*Res
	GetNextPageToken() string
}](
	list func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	setToken func(*Req, string), merge func(all, page PRes),
) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error) {
	return func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		all := PRes(new(Res))
		for {
			res, err := list(ctx, req)
			if err != nil {
				return nil, err
			}
			merge(all, res.Msg)
			next := PRes(res.Msg).GetNextPageToken()
			if next == "" {
				return connect.NewResponse((*Res)(all)), nil
			}
			setToken(req.Msg, next)
		}
	}
}
