package protoconv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/policy"
)

func TestToConnectError(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	bg := context.Background()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		err    error
		code   connect.Code
		logged bool
	}{
		{"a policy error keeps its code", bg, policy.Errorf(policy.CodeNotFound, "rule not found"), connect.CodeNotFound, false},
		{"a failure is internal and logged", bg, errors.New("pool exhausted: secret-ish detail"), connect.CodeInternal, true},
		{"a caller that went away is not a failure", canceled, fmt.Errorf("redis: %w", context.Canceled), connect.CodeCanceled, false},
		{"a caller's deadline is not a failure", expired, fmt.Errorf("redis: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded, false},
		{"an error unrelated to the ended context is still a failure", canceled, errors.New("disk full"), connect.CodeInternal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			err := ToConnectError(tc.ctx, slog.New(slog.NewTextHandler(&log, nil)), tc.err)
			if got := connect.CodeOf(err); got != tc.code {
				t.Errorf("code %v, want %v (%v)", got, tc.code, err)
			}
			if logged := log.Len() > 0; logged != tc.logged {
				t.Errorf("logged %q, want logged=%v", log.String(), tc.logged)
			}
			if tc.code == connect.CodeInternal && strings.Contains(err.Error(), "detail") {
				t.Errorf("internal error text reaches the caller: %v", err)
			}
		})
	}
}
