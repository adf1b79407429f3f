package decision

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/policy"
)

// First returns the first error of errs, the refusals of a call's
// decisions (Service.DecideAll), or nil: a call is refused by its first.
func First(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// RefuseAny refuses a call of n decisions when any would be refused,
// before any is decided or counted: a call is refused whole or decided
// whole. refusal(i) is the i-th decision's refusal, if any; the fields of
// invalid ones are named by index, as in requests[2].cost.
func RefuseAny(field string, n int, refusal func(i int) error) error {
	var fields []policy.FieldError
	for i := range n {
		err := refusal(i)
		if err == nil {
			continue
		}
		var pe *policy.Error
		if !errors.As(err, &pe) || pe.Code != policy.CodeInvalid {
			return err
		}
		if len(pe.Fields) == 0 {
			fields = append(fields, policy.FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Description: pe.Message})
		}
		for _, f := range pe.Fields {
			fields = append(fields, policy.FieldError{Field: fmt.Sprintf("%s[%d].%s", field, i, f.Field), Description: f.Description})
		}
	}
	if len(fields) > 0 {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid " + field, Fields: fields}
	}
	return nil
}
