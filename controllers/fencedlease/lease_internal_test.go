package fencedlease

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func TestOtherUIDIsTheImmutableUIDOnly(t *testing.T) {
	gk := fencingv1alpha1.GroupVersion.WithKind("FencedLease").GroupKind()
	uid := apierrors.NewInvalid(gk, "db", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u1", "field is immutable")})
	spec := apierrors.NewInvalid(gk, "db", field.ErrorList{field.Invalid(field.NewPath("spec", "selector"), "x", "invalid")})
	for _, tc := range []struct {
		err  error
		want bool
	}{{uid, true}, {fmt.Errorf("remove finalizer: %w", uid), true}, {spec, false}, {apierrors.NewConflict(schema.GroupResource{}, "db", errors.New("x")), false}, {nil, false}} {
		if got := otherUID(tc.err); got != tc.want {
			t.Errorf("otherUID(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
