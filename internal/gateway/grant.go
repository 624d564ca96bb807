package gateway

import (
	"errors"
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
	// OwnerUID is the UID of the FencedLease (or FencedShardSet) that
	// controls the Lease.
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
	g, err := heldGrant(lease)
	if err != nil {
		return Grant{}, err
	}
	g.OwnerUID = owner.UID
	return g, nil
}

// ErrNoShard says that a key is not one of a FencedShardSet's shards:
// nobody may write under it.
var ErrNoShard = errors.New("not a shard of")

// ReadShardGrant returns the committed grant of shard key of set, from the
// shard's Lease ("<set>-<key>", record.ShardLeaseName): the Lease
// controlled by this very set (its UID), state held, a canonical fence, a
// holder pod and its UID. A key that is not one of the set's shards wraps
// ErrNoShard. Anything else is no grant, and the error says why.
func ReadShardGrant(lease *coordinationv1.Lease, set *fencingv1alpha1.FencedShardSet, key string) (Grant, error) {
	if !set.HasShard(key) {
		return Grant{}, fmt.Errorf("%q is %w FencedShardSet %s/%s", key, ErrNoShard, set.Namespace, set.Name)
	}
	name := record.ShardLeaseName(set.Name, key)
	if lease == nil {
		return Grant{}, fmt.Errorf("the Lease %s/%s of shard %q does not exist (the shard was never granted)", set.Namespace, name, key)
	}
	if !metav1.IsControlledBy(lease, set) {
		return Grant{}, fmt.Errorf("the Lease %s/%s is not controlled by FencedShardSet %s/%s (UID %s)", lease.Namespace, lease.Name, set.Namespace, set.Name, set.UID)
	}
	g, err := heldGrant(lease)
	if err != nil {
		return Grant{}, err
	}
	g.OwnerUID = set.UID
	return g, nil
}

// heldGrant reads the grant record of a Lease (a FencedLease's or a
// shard's: the same record) when it is committed and names its holder.
func heldGrant(lease *coordinationv1.Lease) (Grant, error) {
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
	g := Grant{Fence: rec.Fence, HolderUID: types.UID(rec.HolderUID)}
	if lease.Spec.HolderIdentity != nil {
		g.HolderPod = *lease.Spec.HolderIdentity
	}
	if g.HolderPod == "" || g.HolderUID == "" {
		return Grant{}, fmt.Errorf("the Lease %s/%s is held without a holder pod (name %q, UID %q)", lease.Namespace, lease.Name, g.HolderPod, g.HolderUID)
	}
	return g, nil
}
