package apistatus_test

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fencedlease/fencedlease/internal/apistatus"
)

func TestOtherUID(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	uid := apierrors.NewInvalid(gk, "state", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u2", "field is immutable")})
	data := apierrors.NewInvalid(gk, "state", field.ErrorList{field.Invalid(field.NewPath("data"), "x", "denied by a policy")})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the UID named is not the object's", uid, true},
		{"wrapped", fmt.Errorf("patch: %w", uid), true},
		{"invalid for another field", data, false},
		{"a conflict", apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "state", fmt.Errorf("changed")), false},
		{"no error", nil, false},
	} {
		if got := apistatus.OtherUID(c.err); got != c.want {
			t.Errorf("%s: OtherUID = %v, want %v", c.name, got, c.want)
		}
	}
}
