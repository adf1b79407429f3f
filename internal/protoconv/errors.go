package protoconv

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicehq/sluice/internal/policy"
)

// connectCodes maps policy codes to Connect codes, in one place.
var connectCodes = map[policy.Code]connect.Code{
	policy.CodeInvalid:            connect.CodeInvalidArgument,
	policy.CodeNotFound:           connect.CodeNotFound,
	policy.CodeConflict:           connect.CodeAlreadyExists,
	policy.CodeUnauthenticated:    connect.CodeUnauthenticated,
	policy.CodePermissionDenied:   connect.CodePermissionDenied,
	policy.CodeUnavailable:        connect.CodeUnavailable,
	policy.CodeResourceExhausted:  connect.CodeResourceExhausted,
	policy.CodeAborted:            connect.CodeAborted,
	policy.CodeFailedPrecondition: connect.CodeFailedPrecondition,
}

// ToConnectError turns err into a Connect error: policy errors with their code,
// message and field details (google.rpc.BadRequest); the end of ctx (the
// caller went away, or its deadline passed) as Canceled or
// DeadlineExceeded, not logged: it is the caller's doing; anything else is
// logged and answered as an internal error without its text.
func ToConnectError(ctx context.Context, logger *slog.Logger, err error) error {
	var pe *policy.Error
	code, ok := connectCodes[policy.ErrorCode(err)]
	if !ok || !errors.As(err, &pe) {
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
	ce := connect.NewError(code, errors.New(pe.Message))
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
