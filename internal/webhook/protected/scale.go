package protected

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// ScaleGuard guards an object's scale: from then on the scale webhook
// (whose matchCondition asks the guard) is called for its scale writes.
// See internal/webhook/scaleguard.
type ScaleGuard interface {
	Ensure(ctx context.Context, gr schema.GroupResource, ns, name string) error
}

// guardScale guards the object of an admitted write that leaves it
// protected, when the webhook decides the scale writes of its resource:
// before the write is stored, so that no scale write of a protected object
// passes the scale webhook by. A dry run changes nothing (the webhook's
// sideEffects are NoneOnDryRun).
func (h *Handler) guardScale(ctx context.Context, req admission.Request, r fencing.Request, listed []coverage.Resource) error {
	if h.ScaleGuard == nil || r.DryRun || r.New == nil || r.New.Labels[fencingv1alpha1.LabelProtectedBy] == "" {
		return nil
	}
	if !scaleListed(listed, req.Resource.Group, req.Resource.Resource) {
		return nil
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if err := h.ScaleGuard.Ensure(ctx, gr, r.Namespace, r.Name); err != nil {
		return fmt.Errorf("%s %s/%s: cannot guard its scale writes, so the write is not admitted: %w", r.Kind, r.Namespace, r.Name, err)
	}
	return nil
}

// scaleListed says whether the configuration sends the scale writes of the
// resource (an entry resource/scale: the scale webhook's).
func scaleListed(listed []coverage.Resource, group, resource string) bool {
	for _, l := range listed {
		if l.Group == group && l.Resource == resource && l.SubResource == "scale" {
			return true
		}
	}
	return false
}
