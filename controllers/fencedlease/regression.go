package fencedlease

import (
	"context"
	"fmt"
	"time"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// refusal is the last grant of a FencedLease refused for a fence
// regression: when, and why.
type refusal struct {
	at     time.Time
	reason holder.Refusal
}

// refused remembers that a grant was refused for a fence regression at
// now.
func (mem *memory) refused(r holder.Refusal, now time.Time) {
	mem.refusal = &refusal{at: now, reason: r}
}

// stillRefused tells, while the last refusal is less than
// holder.RegressionRetry old at now, how long the next try waits and the
// refusal.
func (mem *memory) stillRefused(now time.Time) (time.Duration, *holder.Refusal) {
	if mem.refusal == nil {
		return 0, nil
	}
	wait := mem.refusal.at.Add(holder.RegressionRetry).Sub(now)
	if wait <= 0 {
		return 0, nil
	}
	reason := mem.refusal.reason
	return wait, &reason
}

// readRestored reads again from the API server a held grant whose Lease's
// version is not above the fence floor, before anything is decided on it:
// a cache that lags shows older versions too. The store may have brought it
// back from the past (an etcd restore); then the plan ends it
// (holder's restoredGrant). A cache that lagged, or a Lease that changed
// since, leaves the reconcile stale: the next look decides.
func (r *Reconciler) readRestored(ctx context.Context, s *scope, floor int64) error {
	if unsaved(s.lease) || holder.LeaseOf(s.lease).State != holder.StateHeld || !belowFloor(s.lease.ResourceVersion, floor) {
		return nil
	}
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.lease), live); err != nil {
		return fmt.Errorf("read Lease %s again, its version below the fence floor %d: %w", klog.KObj(s.lease), floor, err)
	}
	if !belowFloor(live.ResourceVersion, floor) || holder.LeaseOf(live).State != holder.StateHeld {
		s.found(stale)
		return nil
	}
	s.lease = live
	return nil
}

// belowFloor says whether resourceVersion rv is not above the fence floor
// (holder.CheckFloor's regression; a version that is no number is not).
func belowFloor(rv string, floor int64) bool {
	r := holder.CheckFloor(rv, floor)
	return r != nil && r.Reason == fencingv1alpha1.ReasonFenceRegression
}

// checkCacheAhead looks, after a write planned on the Lease cache
// conflicted, whether the cache is ahead of the API server's store: the
// Lease as the API server has it is older than the cached one. Only a store
// that went back in time (an etcd restore) does that; the cache then keeps
// the future until the store's revision reaches it, because its watch asks
// for versions from there on, and every write planned on it conflicts. The
// Lease is then read from the API server (leaseBehindCache) until the cache
// catches up.
func (r *Reconciler) checkCacheAhead(ctx context.Context, s *scope) {
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.lease), live); err != nil {
		return
	}
	if live.UID == s.lease.UID && record.MaybeNewer(s.lease.ResourceVersion, live.ResourceVersion) {
		ctrl.LoggerFrom(ctx).Info("The Lease cache is ahead of the API server's store (was etcd restored?); reading the Lease from the API server until it catches up",
			"lease", klog.KObj(live), "cached", s.lease.ResourceVersion, "stored", live.ResourceVersion)
		s.mem.storeWentBack()
	}
}

// leaseBehindCache returns the Lease to plan on: the cached one, or, while
// the cache is ahead of the store (checkCacheAhead), the API server's, until
// the cache holds that version or a newer one.
func (r *Reconciler) leaseBehindCache(ctx context.Context, mem *memory, cached *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if !mem.isAhead(leaseCache) {
		return cached, nil
	}
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), live); err != nil {
		return nil, fmt.Errorf("read Lease %s from the API server, its cache being ahead of the store: %w", klog.KObj(cached), err)
	}
	if live.UID != cached.UID || !record.MaybeNewer(cached.ResourceVersion, live.ResourceVersion) {
		mem.caughtUp(leaseCache)
		return cached, nil
	}
	return live, nil
}

// sawLiveBeat records a version of the heartbeat read from the API server.
// One older than a version this process saw committed means the store went
// back in time (an etcd restore without a revision bump): the cache of
// every Lease may then hold versions the store lost, and show grants that
// no longer exist, or hide the ones brought back. Every FencedLease is then
// looked at again on its Lease as the API server has it (leaseBehindCache),
// and the heartbeat is followed on the store's new timeline.
func (r *Reconciler) sawLiveBeat(ctx context.Context, l *coordinationv1.Lease) {
	if seen, back := r.mem.sawStoreGoBack(l); back {
		ctrl.LoggerFrom(ctx).Info("The API server's store went back in time (was etcd restored?): the heartbeat's version is older than one already seen; reading every Lease from the API server until the cache catches up",
			"lease", klog.KObj(l), "seen", seen, "stored", l.ResourceVersion)
	}
	r.mem.sawBeat(l)
}

// sawStoreGoBack checks a live version of the heartbeat against the newest
// one seen; when it is older, it marks every Lease cache ahead of the
// store and starts the heartbeat again from the live version (its last
// renewal seen stays when it was).
func (m *memories) sawStoreGoBack(l *coordinationv1.Lease) (seen string, back bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen = m.beat.rv
	if seen == "" || !record.Newer(seen, l.ResourceVersion) {
		return seen, false
	}
	m.beat = beatSeen{rv: l.ResourceVersion, beats: beatsOf(l), changedAt: m.beat.changedAt, ahead: maxVersion(m.beat.ahead, seen)}
	for _, mem := range m.byKey {
		mem.storeWentBack()
	}
	m.wentBack++
	m.woken = true
	return seen, true
}

// beatFromLostPast says whether a cached version of the heartbeat may be
// from a past the store lost: not above the newest version seen before the
// store went back.
func (m *memories) beatFromLostPast(l *coordinationv1.Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.beat.ahead != "" && !record.Newer(l.ResourceVersion, m.beat.ahead)
}

// takeWentBack returns every FencedLease this process knows once after the
// store was found to have gone back, to be looked at again.
func (m *memories) takeWentBack() []types.NamespacedName {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.woken {
		return nil
	}
	m.woken = false
	keys := make([]types.NamespacedName, 0, len(m.byKey))
	for key := range m.byKey {
		keys = append(keys, key)
	}
	return keys
}

// maxVersion is the later of two resourceVersions (record.Newer).
func maxVersion(a, b string) string {
	if record.Newer(b, a) || a == "" {
		return b
	}
	return a
}

// fencedLeaseBehindCache returns the FencedLease to reconcile: the cached
// one, or, while its cache may be ahead of a store that went back, the API
// server's, until the cache holds that version or a newer one. The status
// then records what the restored store holds instead of conflicting until
// the cache lists again.
func (r *Reconciler) fencedLeaseBehindCache(ctx context.Context, mem *memory, cached *fencingv1alpha1.FencedLease) (*fencingv1alpha1.FencedLease, error) {
	key := client.ObjectKeyFromObject(cached)
	if !mem.isAhead(fencedLeaseCache) {
		return cached, nil
	}
	live := &fencingv1alpha1.FencedLease{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		return nil, fmt.Errorf("read FencedLease %s from the API server, its cache being ahead of the store: %w", klog.KObj(cached), err)
	}
	if live.UID != cached.UID || !record.MaybeNewer(cached.ResourceVersion, live.ResourceVersion) {
		mem.caughtUp(fencedLeaseCache)
		return cached, nil
	}
	mem.written = nil
	return live, nil
}
