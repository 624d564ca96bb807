package protected

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// listed are the resources the webhook decides writes of.
func (h *Handler) listed(ctx context.Context) []coverage.Resource {
	if h.Resources == nil {
		return coverage.DefaultResources
	}
	return h.Resources.Listed(ctx)
}

// subResourceMetadata gives a subresource write whose objects carry none of
// the object's metadata (the scale subresource's objects are Scales, with a
// name and nothing else) the metadata of the object itself, read from the
// API server, and names it by its own kind. The webhook of such writes
// cannot select them by label (the API server matches the objectSelector
// on the Scale), so it sees every one of them: the object's label says
// whether it is protected. A status write's objects are the object's own.
func (h *Handler) subResourceMetadata(ctx context.Context, req admission.Request, r *fencing.Request) error {
	if r.SubResource == "" || r.Operation == fencing.Delete {
		return nil
	}
	if _, ok := fencing.ProtectedBy(*r); ok {
		return nil
	}
	if h.Mapper == nil {
		return fmt.Errorf("no REST mapper to read the object of a %s write", r.SubResource)
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	gvk, err := h.Mapper.KindFor(gvr)
	if err != nil {
		return fmt.Errorf("the kind of resource %s: %w", gvr, err)
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if err := h.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, obj); err != nil {
		return fmt.Errorf("read %s %s/%s for its %s write: %w", gvk.Kind, r.Namespace, r.Name, r.SubResource, err)
	}
	md := &fencing.Object{Labels: obj.Labels, Annotations: obj.Annotations}
	r.Old, r.New, r.Kind = md, md, gvk.Kind
	return nil
}
