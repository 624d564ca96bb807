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

// GrantReader reads the committed grant of a FencedLease, or of a shard of
// a FencedShardSet, from the API server on every call: the Lease is never
// taken from a cache (it lags, and another gateway replica has its own).
// The FencedLease or FencedShardSet itself is cached briefly, only to check
// that it is the one that controls the Lease (a UID never changes), to know
// a set's keys, and to name it in Events; it is read again whenever the
// Lease names another controller, or the key is not one of a cached set's.
type GrantReader struct {
	Kube kubernetes.Interface
	// Client reads FencedLeases and FencedShardSets (no cache).
	Client client.Reader
	// FencedLeaseTTL is how long a FencedLease or FencedShardSet is reused.
	FencedLeaseTTL time.Duration
	// MaxFencedLeases bounds that cache (each kind on its own).
	MaxFencedLeases int

	fls  ttlCache[*fencingv1alpha1.FencedLease]
	sets ttlCache[*fencingv1alpha1.FencedShardSet]
}

// ttlCache keeps objects (nil: known not to exist) for a while; it is
// emptied when full.
type ttlCache[T client.Object] struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]ttlEntry[T]
}

type ttlEntry[T client.Object] struct {
	obj     T
	expires time.Time
}

// get returns the object of key, from the cache unless fresh or expired;
// the zero T (nil) when it does not exist.
func (c *ttlCache[T]) get(ctx context.Context, r client.Reader, key types.NamespacedName, fresh bool, ttl time.Duration, max int,
	newObj func() T) (T, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && !fresh && now.Before(e.expires) {
		return e.obj, nil
	}
	var none T
	obj := newObj()
	if err := r.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return none, err
		}
		obj = none
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= max {
		c.entries = map[types.NamespacedName]ttlEntry[T]{}
	}
	c.entries[key] = ttlEntry[T]{obj: obj, expires: now.Add(ttl)}
	return obj, nil
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

// readShard reads the shard's Lease from the API server on every call, and
// the FencedShardSet, which says whether the key is one of its shards and
// which UID controls the shard's Lease, from the cache unless the cached
// set lacks the key or does not control the Lease. A set that shrank is
// judged by its Lease: the operator deletes a removed shard's Lease before
// anything else, and a shard added again is granted on a new Lease with a
// higher fence.
func (r *GrantReader) readShard(ctx context.Context, route Route) (Grant, client.Object, error, error) {
	set, err := r.shardSet(ctx, route, false)
	if err != nil {
		return Grant{}, nil, nil, err
	}
	if set == nil || !set.HasShard(route.Shard) {
		if set, err = r.shardSet(ctx, route, true); err != nil {
			return Grant{}, nil, nil, err
		}
	}
	if set == nil {
		return Grant{}, nil, fmt.Errorf("FencedShardSet %s does not exist", route), nil
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
	if lease != nil && !metav1.IsControlledBy(lease, set) {
		// Re-created since it was cached: read it again.
		if set, err = r.shardSet(ctx, route, true); err != nil {
			return Grant{}, nil, nil, err
		}
		if set == nil {
			return Grant{}, nil, fmt.Errorf("FencedShardSet %s does not exist", route), nil
		}
	}
	grant, grantErr := ReadShardGrant(lease, set, route.Shard)
	return grant, set, grantErr, nil
}

// shardSet returns the route's FencedShardSet, nil when it does not exist.
func (r *GrantReader) shardSet(ctx context.Context, route Route, fresh bool) (*fencingv1alpha1.FencedShardSet, error) {
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.FencedShardSet}
	set, err := r.sets.get(ctx, r.Client, key, fresh, r.FencedLeaseTTL, r.MaxFencedLeases,
		func() *fencingv1alpha1.FencedShardSet { return &fencingv1alpha1.FencedShardSet{} })
	if err != nil {
		return nil, fmt.Errorf("get FencedShardSet %s: %w", route, err)
	}
	return set, nil
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
	fl, err := r.fls.get(ctx, r.Client, key, fresh, r.FencedLeaseTTL, r.MaxFencedLeases,
		func() *fencingv1alpha1.FencedLease { return &fencingv1alpha1.FencedLease{} })
	if err != nil {
		return nil, fmt.Errorf("get FencedLease %s: %w", route, err)
	}
	return fl, nil
}
