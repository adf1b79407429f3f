package protoconv

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicehq/sluice/internal/policy"
)

// ConnectCode is the Connect code of a policy code, from policy's one
// table (policy.Code.Status).
func ConnectCode(c policy.Code) connect.Code { return connect.Code(c.Status().RPC) }

// ToConnectError turns err into a Connect error: policy errors with their code,
// message and field details (google.rpc.BadRequest); the end of ctx (the
// caller went away, or its deadline passed) as Canceled or
// DeadlineExceeded, not logged: it is the caller's doing; anything else is
// logged and answered as an internal error without its text.
func ToConnectError(ctx context.Context, logger *slog.Logger, err error) error {
	var pe *policy.Error
	if !errors.As(err, &pe) || pe.Code == policy.CodeUnknown {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			if errors.Is(cerr, context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, cerr)
			}
			return connect.NewError(connect.CodeCanceled, cerr)
		}
		if logger == nil {
			logger = slog.Default()
		}
		logger.ErrorContext(ctx, "call failed", "err", err)
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	ce := connect.NewError(ConnectCode(pe.Code), errors.New(pe.Message))
	if len(pe.Fields) > 0 {
		br := &errdetails.BadRequest{}
		for _, f := range pe.Fields {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: f.Field, Description: f.Description})
		}
		if d, derr := connect.NewErrorDetail(br); derr == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}
