package gateway

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Grant is the committed grant that a FencedLease's Lease records.
type Grant struct {
	// Fence is the fence of the grant.
	Fence int64
	// HolderPod and HolderUID name the holder pod.
	HolderPod string
	HolderUID types.UID
	// OwnerUID is the UID of the FencedLease that controls the Lease.
	OwnerUID types.UID
}

// ReadGrant returns the committed grant of the Lease of FencedLease name:
// state held, a canonical fence, a holder pod and its UID, and the Lease
// controlled by a FencedLease of the same name. Anything else (pending,
// revoked, released, a Lease the operator does not control) is no grant,
// and the error says why: nobody may write.
func ReadGrant(lease *coordinationv1.Lease, name string) (Grant, error) {
	if lease == nil {
		return Grant{}, fmt.Errorf("the Lease %s does not exist", name)
	}
	owner := metav1.GetControllerOf(lease)
	if owner == nil || owner.Kind != "FencedLease" || owner.APIVersion != fencingv1alpha1.GroupVersion.String() || owner.Name != name {
		return Grant{}, fmt.Errorf("the Lease %s/%s is not controlled by FencedLease %s", lease.Namespace, lease.Name, name)
	}
	a := lease.Annotations
	rec := record.ParseLease(a)
	if rec.State != record.StateHeld {
		state := rec.State
		if state == "" {
			state = "none"
		}
		return Grant{}, fmt.Errorf("the Lease %s/%s has no committed grant (state %s)", lease.Namespace, lease.Name, state)
	}
	if _, err := record.ParseFence(a[record.AnnotationFence]); err != nil {
		return Grant{}, fmt.Errorf("the Lease %s/%s: %w", lease.Namespace, lease.Name, err)
	}
	g := Grant{Fence: rec.Fence, HolderUID: types.UID(rec.HolderUID), OwnerUID: owner.UID}
	if lease.Spec.HolderIdentity != nil {
		g.HolderPod = *lease.Spec.HolderIdentity
	}
	if g.HolderPod == "" || g.HolderUID == "" {
		return Grant{}, fmt.Errorf("the Lease %s/%s is held without a holder pod (name %q, UID %q)", lease.Namespace, lease.Name, g.HolderPod, g.HolderUID)
	}
	return g, nil
}
