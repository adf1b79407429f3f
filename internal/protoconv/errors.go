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
	policy.CodeInvalid:           connect.CodeInvalidArgument,
	policy.CodeNotFound:          connect.CodeNotFound,
	policy.CodeConflict:          connect.CodeAlreadyExists,
	policy.CodeUnauthenticated:   connect.CodeUnauthenticated,
	policy.CodePermissionDenied:  connect.CodePermissionDenied,
	policy.CodeUnavailable:       connect.CodeUnavailable,
	policy.CodeResourceExhausted: connect.CodeResourceExhausted,
}

// ToConnectError turns err into a Connect error: policy errors with their code,
// message and field details (google.rpc.BadRequest); anything else is
// logged and answered as an internal error without its text.
func ToConnectError(ctx context.Context, logger *slog.Logger, err error) error {
	var pe *policy.Error
	code, ok := connectCodes[policy.ErrorCode(err)]
	if !ok || !errors.As(err, &pe) {
		if logger == nil {
			logger = slog.Default()
		}
		logger.ErrorContext(ctx, "control plane call failed", "err", err)
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
