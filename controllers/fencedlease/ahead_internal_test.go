package fencedlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func leaseAt(rv, uid string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: rv, UID: types.UID(uid)}}
}

// After an etcd restore the Lease cache keeps versions the store has not
// reached, and every write planned on it conflicts: once a conflict shows
// the store behind the cache, the Lease is read from the API server, until
// the cache holds the stored version or a newer one. A cache that merely
// lags (older than the store) never switches the reads.
func TestLeaseReadFromTheAPIServerWhileTheCacheIsAhead(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	stored := leaseAt("254", "u1")
	r := &Reconciler{APIReader: fixedReader{l: stored}, Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0))}
	r.once.Do(r.defaults)

	// A cache that lags behind the store: a conflict switches nothing.
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("250", "u1")})
	if got, err := r.leaseBehindCache(t.Context(), key, leaseAt("250", "u1")); err != nil || got.ResourceVersion != "250" {
		t.Fatalf("lagging cache: planned on %v (%v), want the cached 250", got.ResourceVersion, err)
	}

	// A cache ahead of the store (568 cached, 254 stored).
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("568", "u1")})
	got, err := r.leaseBehindCache(t.Context(), key, leaseAt("568", "u1"))
	if err != nil || got.ResourceVersion != "254" {
		t.Fatalf("cache ahead: planned on %v (%v), want the stored 254", got.ResourceVersion, err)
	}
	// The cache catches up: back to the cache, for good.
	if got, _ := r.leaseBehindCache(t.Context(), key, leaseAt("254", "u1")); got.ResourceVersion != "254" || r.mem.isAhead(key) {
		t.Fatalf("caught up: planned on %v, ahead %v; want the cache, not ahead", got.ResourceVersion, r.mem.isAhead(key))
	}
	// A Lease created anew (another UID) is no restore.
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("900", "u2")})
	if r.mem.isAhead(key) {
		t.Fatal("a Lease of another UID counted as a cache ahead of the store")
	}
}
