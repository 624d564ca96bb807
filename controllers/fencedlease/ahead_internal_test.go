package fencedlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
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
	mem := r.mem.load(key)

	// A cache that lags behind the store: a conflict switches nothing.
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("250", "u1"), mem: mem})
	if got, err := r.leaseBehindCache(t.Context(), mem, leaseAt("250", "u1")); err != nil || got.ResourceVersion != "250" {
		t.Fatalf("lagging cache: planned on %v (%v), want the cached 250", got.ResourceVersion, err)
	}

	// A cache ahead of the store (568 cached, 254 stored).
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("568", "u1"), mem: mem})
	got, err := r.leaseBehindCache(t.Context(), mem, leaseAt("568", "u1"))
	if err != nil || got.ResourceVersion != "254" {
		t.Fatalf("cache ahead: planned on %v (%v), want the stored 254", got.ResourceVersion, err)
	}
	// The cache catches up: back to the cache, for good.
	if got, _ := r.leaseBehindCache(t.Context(), mem, leaseAt("254", "u1")); got.ResourceVersion != "254" || mem.isAhead(leaseCache) {
		t.Fatalf("caught up: planned on %v, ahead %v; want the cache, not ahead", got.ResourceVersion, mem.isAhead(leaseCache))
	}
	// A Lease created anew (another UID) is no restore.
	r.checkCacheAhead(t.Context(), &scope{key: key, lease: leaseAt("900", "u2"), mem: mem})
	if mem.isAhead(leaseCache) {
		t.Fatal("a Lease of another UID counted as a cache ahead of the store")
	}
}

// A plain etcd restore is seen by the heartbeat first: a live read of it
// older than a version already committed. Every FencedLease is then marked
// to read its Lease from the API server and is woken once; the cached
// heartbeat from the lost past no longer counts as a renewal, and the
// renewals on the store's new timeline do. A heartbeat that merely moved
// on marks nothing.
func TestStoreGoingBackIsSeenOnTheHeartbeat(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := clocktesting.NewFakePassiveClock(t0)
	r := &Reconciler{Clock: clk, Heartbeat: &Heartbeat{Namespace: "op", Name: "hb"}}
	r.once.Do(r.defaults)
	keys := []types.NamespacedName{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}
	for _, k := range keys {
		r.mem.store(r.mem.load(k))
	}
	r.mem.sawBeat(beatLease("583", 40))
	// A reconcile of the first is running while the store goes back: its
	// memory, loaded before, is marked when it is stored.
	running := r.mem.load(keys[0])
	running.published = ownPublication{uid: "p", fence: 300, rv: "600"}

	r.sawLiveBeat(t.Context(), beatLease("590", 41))
	if r.mem.load(keys[0]).isAhead(leaseCache) || len(r.mem.takeWentBack()) != 0 {
		t.Fatal("a newer heartbeat marked the caches ahead")
	}

	clk.SetTime(t0.Add(time.Second))
	r.sawLiveBeat(t.Context(), beatLease("280", 20))
	if running.isAhead(leaseCache) {
		t.Fatal("a loaded memory changed under its reconcile")
	}
	r.mem.store(running)
	for _, k := range keys {
		mem := r.mem.load(k)
		for _, c := range []cache{leaseCache, fencedLeaseCache, podCache} {
			if !mem.isAhead(c) {
				t.Fatalf("%s: cache %d not read around after the store went back", k, c)
			}
		}
		if mem.published != (ownPublication{}) {
			t.Fatalf("%s: a publication from before the store went back is still counted: %+v", k, mem.published)
		}
	}
	// Each cache catches up on its own.
	first := r.mem.load(keys[0])
	first.caughtUp(podCache)
	r.mem.store(first)
	if first = r.mem.load(keys[0]); first.isAhead(podCache) || !first.isAhead(leaseCache) || !first.isAhead(fencedLeaseCache) {
		t.Fatal("the pod cache caught up: want only it no longer ahead")
	}
	if woken := r.mem.takeWentBack(); len(woken) != len(keys) {
		t.Fatalf("woke %v, want every FencedLease once", woken)
	}
	if again := r.mem.takeWentBack(); len(again) != 0 {
		t.Fatalf("woke %v a second time", again)
	}
	if b := r.mem.lastBeat(); b.rv != "280" || !b.changedAt.Equal(t0) {
		t.Fatalf("heartbeat seen %s at %s, want 280 with its last renewal unchanged", b.rv, b.changedAt.Sub(t0))
	}

	clk.SetTime(t0.Add(2 * time.Second))
	if !r.mem.beatFromLostPast(beatLease("590", 41)) || r.mem.beatFromLostPast(beatLease("591", 1)) {
		t.Fatal("versions up to the newest seen before the restore are the lost past, later ones are not")
	}
	r.Client = fakeclient.NewClientBuilder().WithObjects(beatLease("590", 41)).Build()
	r.lookAtBeat(t.Context()) // the cache, still ahead
	if b := r.mem.lastBeat(); b.rv != "280" {
		t.Fatalf("a cached heartbeat from the lost past counted: seen %s", b.rv)
	}
	r.mem.sawBeat(beatLease("281", 21)) // a renewal written on the new timeline
	if b := r.mem.lastBeat(); b.rv != "281" || !b.changedAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("a renewal after the restore not counted: seen %s at %s", b.rv, b.changedAt.Sub(t0))
	}
}

// Once the store went back, the FencedLease is read from the API server
// while its cache holds a later version (its status patches would
// conflict until that cache lists again), and from the cache again once it
// has caught up. Before, the cache alone is read.
func TestFencedLeaseReadFromTheAPIServerWhileTheCacheIsAhead(t *testing.T) {
	fl := func(rv string) *fencingv1alpha1.FencedLease {
		return &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: rv, UID: "u1"}}
	}
	stored := fl("253")
	r := &Reconciler{APIReader: fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(stored).Build(),
		Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0)), Heartbeat: &Heartbeat{Namespace: "op", Name: "hb"}}
	r.once.Do(r.defaults)
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	mem := r.mem.load(key)

	if got, err := r.fencedLeaseBehindCache(t.Context(), mem, fl("577")); err != nil || got.ResourceVersion != "577" {
		t.Fatalf("read %v, %v before the store was seen going back, want the cached 577", got, err)
	}
	r.mem.sawBeat(beatLease("582", 40))
	r.sawLiveBeat(t.Context(), beatLease("242", 20))
	r.mem.catchUp(mem)
	live := &fencingv1alpha1.FencedLease{}
	if err := r.APIReader.Get(t.Context(), key, live); err != nil {
		t.Fatal(err)
	}
	got, err := r.fencedLeaseBehindCache(t.Context(), mem, fl("577"))
	if err != nil || got.ResourceVersion != live.ResourceVersion {
		t.Fatalf("read %v, %v while the cache is ahead, want the stored %s", got, err, live.ResourceVersion)
	}
	if got, err := r.fencedLeaseBehindCache(t.Context(), mem, fl(live.ResourceVersion)); err != nil || got.ResourceVersion != live.ResourceVersion {
		t.Fatalf("read %v, %v once the cache caught up", got, err)
	}
	r.APIReader = nil // no more reads from the API server
	if got, err := r.fencedLeaseBehindCache(t.Context(), mem, fl("600")); err != nil || got.ResourceVersion != "600" {
		t.Fatalf("read %v, %v after the cache caught up, want the cached 600", got, err)
	}
}

// podsAhead: a cached pod at a later version than the API server's copy
// (the store went back) is ahead; one at an earlier version only lags, and
// a pod the API server does not have is left to the cache.
func TestPodsAhead(t *testing.T) {
	pod := func(uid, rv string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}
	}
	live := []corev1.Pod{pod("a", "260"), pod("b", "270")}
	for _, tc := range []struct {
		name   string
		cached []corev1.Pod
		want   bool
	}{
		{name: "the same versions", cached: []corev1.Pod{pod("a", "260"), pod("b", "270")}},
		{name: "a cache that lags", cached: []corev1.Pod{pod("a", "250"), pod("b", "270")}},
		{name: "a pod from the lost past", cached: []corev1.Pod{pod("a", "260"), pod("b", "571")}, want: true},
		{name: "a pod the store does not have", cached: []corev1.Pod{pod("c", "580")}},
	} {
		if got := podsAhead(tc.cached, live); got != tc.want {
			t.Errorf("%s: podsAhead %v, want %v", tc.name, got, tc.want)
		}
	}
}
