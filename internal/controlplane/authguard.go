package controlplane

import (
	"errors"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/authguard"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// newAuthGuard returns a guard of perMinute invalid keys a minute per
// address, or nil (no limit) when perMinute is 0 or less: each invalid
// key costs a database lookup, so a flood of them from one address is
// refused before it reaches the database.
func newAuthGuard(perMinute int, now func() time.Time) *authguard.Guard {
	return authguard.New(perMinute, now, "invalid keys from this address")
}

// newCallGuard returns a guard of perMinute calls a minute per key, or nil
// (no limit) when perMinute is 0 or less: one tenant's runaway script
// cannot take the database from others.
func newCallGuard(perMinute int, now func() time.Time) *authguard.Guard {
	return authguard.New(perMinute, now, "calls with this key")
}

// guardError is a guard's refusal as the API answers it:
// resource_exhausted, with how long to wait in Retry-After.
func guardError(err error) error {
	var r *authguard.RefusedError
	if !errors.As(err, &r) {
		return err
	}
	cerr := protoconv.Error(policy.CodeResourceExhausted, r.Error())
	cerr.Meta().Set("Retry-After", strconv.Itoa(int(r.Wait/time.Second)))
	return cerr
}
