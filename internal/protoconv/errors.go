package protoconv

import (
	"context"
	"errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicehq/sluice/internal/policy"
)

// ConnectCode is the Connect code of a policy code, from policy's one
// table (policy.Code.Status).
func ConnectCode(c policy.Code) connect.Code { return connect.Code(c.Status().RPC) }

// Error is the Connect error of code, from the one table, with message:
// for the refusals a transport makes itself (no key, the wrong role, a
// malformed call), which have no policy.Error to convert.
func Error(code policy.Code, message string) *connect.Error {
	return connect.NewError(ConnectCode(code), errors.New(message))
}

// GRPCError is Error as a gRPC status error.
func GRPCError(code policy.Code, message string) error {
	return status.Error(codes.Code(code.Status().RPC), message)
}

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

// GRPCStatus turns a Connect error (protoconv.ToConnectError's, the one
// mapping of domain errors) into the gRPC status with the same code
// (Connect's codes are gRPC's), message and details.
func GRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return status.Error(codes.Internal, "internal error")
	}
	st := status.New(codes.Code(ce.Code()), ce.Message())
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if withDetail, err := st.WithDetails(protoadapt.MessageV1Of(v)); err == nil {
				st = withDetail
			}
		}
	}
	return st.Err()
}
