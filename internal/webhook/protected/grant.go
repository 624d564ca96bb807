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

// grant returns the object that grants the protector of a request (its
// FencedLease, or the FencedShardSet of its shard; nil when there is none)
// and the protector's grant as the API server holds it now.
func (h *Handler) grant(ctx context.Context, namespace string, p fencing.Protector) (client.Object, fencing.Lease, error) {
	if p.Sharded {
		set, g, err := h.shardGrant(ctx, namespace, p)
		if set == nil {
			return nil, g, err
		}
		return set, g, err
	}
	fl, g, err := h.currentGrant(ctx, namespace, p.Name)
	if fl == nil {
		return nil, g, err
	}
	return fl, g, err
}

// currentGrant returns the FencedLease that protects an object and its grant
// as the API server holds it now. The FencedLease comes from the cache (it
// says only that the FencedLease exists, and which one it is); the grant is
// read from its Lease on the API server, for every decision: the Lease is
// where a grant is committed first (its status patch follows), and a cache
// that has not seen a newer grant would let the holder it replaced create
// and delete protected objects, even after this very webhook admitted a
// write of the newer grant. A second webhook replica has a cache of its own,
// so no memory of one process could close that gap; the read can.
//
// A FencedLease that does not exist is not an error: the grant is not Found.
func (h *Handler) currentGrant(ctx context.Context, namespace, name string) (*fencingv1alpha1.FencedLease, fencing.Lease, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	fl, err := getFencedLease(ctx, h.Cache, key)
	if err != nil {
		return nil, fencing.Lease{}, err
	}
	if fl == nil {
		// Created a moment ago, the cache may not have it yet.
		if fl, err = getFencedLease(ctx, h.APIReader, key); err != nil || fl == nil {
			return nil, fencing.Lease{}, err
		}
	}
	l := &coordinationv1.Lease{}
	switch err := h.APIReader.Get(ctx, key, l); {
	case apierrors.IsNotFound(err):
		return fl, fencing.Lease{Found: true, Fence: fl.Status.Fence}, nil
	case err != nil:
		return nil, fencing.Lease{}, fmt.Errorf("get Lease %s: %w", key, err)
	}
	if ref := metav1.GetControllerOf(l); ref != nil && ref.UID != fl.UID {
		// The cache may lag behind a FencedLease deleted and created again.
		live, err := getFencedLease(ctx, h.APIReader, key)
		if err != nil {
			return nil, fencing.Lease{}, err
		}
		if live == nil {
			return nil, fencing.Lease{}, nil
		}
		fl = live
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Read the grant", "lease", klog.KObj(l), "resourceVersion", l.ResourceVersion)
	return fl, grantOn(l, fl), nil
}

// grantOn is the grant that the Lease of fl records: its last committed
// fence, and its holder while that grant is held. A Lease that fl does not
// control (left by an earlier FencedLease of the name, or someone else's)
// names no holder; neither does a grant that is pending (written, not
// committed), revoked or released. The fence never counts below the one the
// FencedLease's status records.
func grantOn(l *coordinationv1.Lease, fl *fencingv1alpha1.FencedLease) fencing.Lease {
	rec := record.ParseLease(l.Annotations)
	g := fencing.Lease{Found: true, Fence: max(rec.Fence, fl.Status.Fence)}
	if metav1.IsControlledBy(l, fl) && rec.Held() && rec.Fence == g.Fence {
		g.Holder = &fencing.Holder{PodName: ptr.Deref(l.Spec.HolderIdentity, ""), PodUID: types.UID(rec.HolderUID)}
	}
	return g
}

// getFencedLease reads a FencedLease; nil when it does not exist.
func getFencedLease(ctx context.Context, r client.Reader, key types.NamespacedName) (*fencingv1alpha1.FencedLease, error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.Get(ctx, key, fl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get FencedLease %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	return fl, nil
}
