package protected

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// readOwners reads, from the API server, the owners a write gives a
// protected object (fencing.AddedOwners), for the owner rule of
// fencing.Precheck. A write that adds no owner, the common case, costs
// nothing; neither does an owner of a resource the webhook does not
// protect, which breaks the rule whatever it holds. The privileged callers
// are exempt from the rule, and are not read for.
func (h *Handler) readOwners(ctx context.Context, r *fencing.Request, listed []coverage.Resource) error {
	added := fencing.AddedOwners(*r)
	if len(added) == 0 || h.Principals.Exempt(r.Caller) {
		return nil
	}
	if _, ok := fencing.ProtectedBy(*r); !ok {
		return nil
	}
	r.Owners = make(map[types.UID]fencing.Owner, len(added))
	for _, o := range added {
		got, err := h.readOwner(ctx, r.Namespace, o, listed)
		if err != nil {
			return fmt.Errorf("read owner %s of %s %s/%s: %w", o, r.Kind, r.Namespace, r.Name, err)
		}
		r.Owners[o.UID] = got
	}
	return nil
}

func (h *Handler) readOwner(ctx context.Context, ns string, o fencing.OwnerRef, listed []coverage.Resource) (fencing.Owner, error) {
	key := types.NamespacedName{Namespace: ns, Name: o.Name}
	switch {
	case o.IsFencedLease():
		fl, err := getFencedLease(ctx, h.APIReader, key)
		if err != nil || fl == nil {
			return fencing.Owner{}, err
		}
		return fencing.Owner{Found: fl.UID == o.UID}, nil
	case o.IsFencedShardSet():
		set, err := getFencedShardSet(ctx, h.APIReader, key)
		if err != nil || set == nil {
			return fencing.Owner{}, err
		}
		return fencing.Owner{Found: set.UID == o.UID}, nil
	}
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return fencing.Owner{}, nil // not an object anything can own through
	}
	if h.Mapper == nil {
		return fencing.Owner{}, fmt.Errorf("no REST mapper to find the resource of kind %s", o.Kind)
	}
	m, err := h.Mapper.RESTMapping(gv.WithKind(o.Kind).GroupKind(), gv.Version)
	if err != nil {
		return fencing.Owner{}, nil // a kind the API server does not serve: not protected
	}
	if !coverage.Covers(listed, m.Resource.Group, m.Resource.Resource, "") {
		return fencing.Owner{}, nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(m.GroupVersionKind)
	switch err := h.APIReader.Get(ctx, key, obj); {
	case apierrors.IsNotFound(err):
		return fencing.Owner{Listed: true}, nil
	case apierrors.IsForbidden(err):
		// The operator reads no ConfigMap or Secret (docs/security.md):
		// an owner it may not read cannot be shown to be protected.
		return fencing.Owner{Listed: true, Unreadable: true}, nil
	case err != nil:
		return fencing.Owner{}, err
	}
	by, _ := fencing.ProtectorOf(obj.Labels)
	return fencing.Owner{Listed: true, Found: obj.UID == o.UID, ProtectedBy: by}, nil
}
