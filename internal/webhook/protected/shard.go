package protected

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fencing"
	"github.com/fencedlease/fencedlease/internal/record"
)

// shardGrant returns the FencedShardSet of a shard and the shard's grant as
// the API server holds it now. The set comes from the cache (it says which
// set it is and which shards it has); the grant is read from the shard's
// Lease ("<set>-<key>") on the API server, for every decision, for the
// reason currentGrant gives: a cache that has not seen a newer grant of the
// shard would let the owner it replaced write.
//
// A set that does not exist is not an error: the grant is not Found. Nor is
// a key that is not one of the set's shards: the grant is not Found, with
// NoShard.
func (h *Handler) shardGrant(ctx context.Context, namespace string, p fencing.Protector) (*fencingv1alpha1.FencedShardSet, fencing.Lease, error) {
	key := types.NamespacedName{Namespace: namespace, Name: p.Name}
	set, err := h.fencedShardSet(ctx, key, p.Shard)
	if err != nil || set == nil {
		return nil, fencing.Lease{}, err
	}
	if !isShard(set, p.Shard) {
		return set, fencing.Lease{NoShard: true}, nil
	}
	l, err := h.shardLease(ctx, namespace, set.Name, p.Shard)
	if err != nil {
		return nil, fencing.Lease{}, err
	}
	if l == nil {
		// Not granted yet: no fence, no owner.
		return set, fencing.Lease{Found: true}, nil
	}
	if ref := metav1.GetControllerOf(l); ref != nil && ref.UID != set.UID {
		// The cache may lag behind a set deleted and created again.
		live, err := getFencedShardSet(ctx, h.APIReader, key)
		if err != nil || live == nil {
			return nil, fencing.Lease{}, err
		}
		if set = live; !isShard(set, p.Shard) {
			return set, fencing.Lease{NoShard: true}, nil
		}
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Read the grant of a shard", "lease", klog.KObj(l), "resourceVersion", l.ResourceVersion)
	return set, shardGrantOn(l, set), nil
}

// fencedShardSet reads a FencedShardSet from the cache, and from the API
// server when the cache does not have it or has it without the shard: the
// set may have been created, or given the shard, a moment ago. nil when it
// does not exist.
func (h *Handler) fencedShardSet(ctx context.Context, key types.NamespacedName, shard string) (*fencingv1alpha1.FencedShardSet, error) {
	set, err := getFencedShardSet(ctx, h.Cache, key)
	if err != nil {
		return nil, err
	}
	if set != nil && isShard(set, shard) {
		return set, nil
	}
	return getFencedShardSet(ctx, h.APIReader, key)
}

// shardLease reads the Lease of a shard from the API server, never from a
// cache; nil when it does not exist.
func (h *Handler) shardLease(ctx context.Context, namespace, set, shard string) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: namespace, Name: record.ShardLeaseName(set, shard)}
	l := &coordinationv1.Lease{}
	switch err := h.APIReader.Get(ctx, key, l); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get Lease %s of shard %q of FencedShardSet %s: %w", key, shard, set, err)
	}
	return l, nil
}

// shardGrantOn is the grant that the Lease of a shard of set records: the
// fence of its last committed grant, and its owner while that grant is
// held. A Lease that the set does not control (left by an earlier set of
// the name, or someone else's) names no owner; neither does a grant that
// is pending (written, not committed), revoked or released.
func shardGrantOn(l *coordinationv1.Lease, set *fencingv1alpha1.FencedShardSet) fencing.Lease {
	rec := record.ParseLease(l.Annotations)
	g := fencing.Lease{Found: true, Fence: rec.Fence}
	if metav1.IsControlledBy(l, set) && rec.Held() {
		g.Holder = &fencing.Holder{PodName: ptr.Deref(l.Spec.HolderIdentity, ""), PodUID: types.UID(rec.HolderUID)}
	}
	return g
}

// isShard says whether key names a shard of the set.
func isShard(set *fencingv1alpha1.FencedShardSet, key string) bool { return set.HasShard(key) }

// getFencedShardSet reads a FencedShardSet; nil when it does not exist.
func getFencedShardSet(ctx context.Context, r client.Reader, key types.NamespacedName) (*fencingv1alpha1.FencedShardSet, error) {
	set := &fencingv1alpha1.FencedShardSet{}
	if err := r.Get(ctx, key, set); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get FencedShardSet %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	return set, nil
}
