package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// GrantReader reads the committed grant of a FencedLease from the API
// server on every call: the Lease is never taken from a cache (it lags, and
// another gateway replica has its own). The FencedLease itself is cached
// briefly, only to check that it is the one that controls the Lease (a UID
// never changes) and to name it in Events.
type GrantReader struct {
	Kube kubernetes.Interface
	// Client reads FencedLeases (no cache).
	Client client.Reader
	// FencedLeaseTTL is how long a FencedLease is reused.
	FencedLeaseTTL time.Duration
	// MaxFencedLeases bounds that cache.
	MaxFencedLeases int

	mu  sync.Mutex
	fls map[types.NamespacedName]flEntry
}

type flEntry struct {
	fl      *fencingv1alpha1.FencedLease
	expires time.Time
}

// Read returns the committed grant of the route's FencedLease, or of the
// route's shard of a FencedShardSet, and that FencedLease or
// FencedShardSet when it exists (the object Events are recorded on).
// grantErr says why there is no grant (nobody may write); err is an API
// error (the write must fail, not be judged).
func (r *GrantReader) Read(ctx context.Context, route Route) (Grant, client.Object, error, error) {
	if route.FencedShardSet != "" {
		return r.readShard(ctx, route)
	}
	grant, fl, grantErr, err := r.readLease(ctx, route)
	if fl == nil {
		// A nil interface, never a typed nil: no Event on nothing.
		return grant, nil, grantErr, err
	}
	return grant, fl, grantErr, err
}

// readShard reads the FencedShardSet and the shard's Lease from the API
// server, both on every call: the set says whether the key is one of its
// shards and which UID controls the shard's Lease.
func (r *GrantReader) readShard(ctx context.Context, route Route) (Grant, client.Object, error, error) {
	set := &fencingv1alpha1.FencedShardSet{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: route.Namespace, Name: route.FencedShardSet}, set); err != nil {
		if apierrors.IsNotFound(err) {
			return Grant{}, nil, fmt.Errorf("FencedShardSet %s does not exist", route), nil
		}
		return Grant{}, nil, nil, fmt.Errorf("get FencedShardSet %s: %w", route, err)
	}
	if !set.HasShard(route.Shard) {
		_, grantErr := ReadShardGrant(nil, set, route.Shard)
		return Grant{}, set, grantErr, nil
	}
	lease, err := r.Kube.CoordinationV1().Leases(route.Namespace).Get(ctx, route.LeaseName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = nil, nil
	}
	if err != nil {
		return Grant{}, nil, nil, fmt.Errorf("get Lease %s/%s of %s: %w", route.Namespace, route.LeaseName(), route.Lock(), err)
	}
	grant, grantErr := ReadShardGrant(lease, set, route.Shard)
	return grant, set, grantErr, nil
}

// readLease reads the grant of a FencedLease route.
func (r *GrantReader) readLease(ctx context.Context, route Route) (grant Grant, fl *fencingv1alpha1.FencedLease, grantErr, err error) {
	lease, err := r.Kube.CoordinationV1().Leases(route.Namespace).Get(ctx, route.FencedLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = nil, nil
	}
	if err != nil {
		return Grant{}, nil, nil, fmt.Errorf("get Lease %s: %w", route, err)
	}
	fl, err = r.fencedLease(ctx, route, false)
	if err != nil {
		return Grant{}, nil, nil, err
	}
	grant, grantErr = ReadGrant(lease, route.FencedLease)
	if grantErr != nil {
		return Grant{}, fl, grantErr, nil
	}
	if fl == nil || fl.UID != grant.OwnerUID {
		// Created or re-created since it was cached: read it again.
		if fl, err = r.fencedLease(ctx, route, true); err != nil {
			return Grant{}, nil, nil, err
		}
	}
	switch {
	case fl == nil:
		return Grant{}, nil, fmt.Errorf("FencedLease %s does not exist", route), nil
	case fl.UID != grant.OwnerUID:
		return Grant{}, fl, fmt.Errorf("the Lease %s is controlled by another FencedLease (UID %s, not %s)", route, grant.OwnerUID, fl.UID), nil
	}
	return grant, fl, nil, nil
}

// fencedLease returns the FencedLease, nil when it does not exist.
func (r *GrantReader) fencedLease(ctx context.Context, route Route, fresh bool) (*fencingv1alpha1.FencedLease, error) {
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.FencedLease}
	now := time.Now()
	r.mu.Lock()
	e, ok := r.fls[key]
	r.mu.Unlock()
	if ok && !fresh && now.Before(e.expires) {
		return e.fl, nil
	}
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.Client.Get(ctx, key, fl); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get FencedLease %s: %w", route, err)
		}
		fl = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fls == nil || len(r.fls) >= r.MaxFencedLeases {
		r.fls = map[types.NamespacedName]flEntry{}
	}
	r.fls[key] = flEntry{fl: fl, expires: now.Add(r.FencedLeaseTTL)}
	return fl, nil
}
