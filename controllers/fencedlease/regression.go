package fencedlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// regressionRetry is how soon to try a grant again after one was refused
// for a fence regression.
const regressionRetry = 10 * time.Second

// refusal is the last grant of a FencedLease refused for a fence
// regression: when, and the Degraded condition it set.
type refusal struct {
	at        time.Time
	condition condition
}

// refused remembers that a grant of key was refused for a fence regression
// now, with the condition it set.
func (m *memories) refused(key types.NamespacedName, c condition) {
	now := m.clock.Now()
	m.with(key, func(mem *memory) { mem.refusal = &refusal{at: now, condition: c} })
}

// stillRefused tells, while the last refusal of key is less than
// regressionRetry old, how long the next try waits and the condition the
// refusal set. A grant below the floor stays pending, and its write wakes
// the FencedLease again through the Lease's watch: without this wait the
// tries would follow one another as fast as the reconciles go, a Lease
// write and an Event each, until the store's revision passed the floor.
func (m *memories) stillRefused(key types.NamespacedName) (time.Duration, *condition) {
	var wait time.Duration
	var c *condition
	now := m.clock.Now()
	m.with(key, func(mem *memory) {
		if mem.refusal == nil {
			return
		}
		if wait = mem.refusal.at.Add(regressionRetry).Sub(now); wait > 0 {
			cond := mem.refusal.condition
			c = &cond
		}
	})
	return max(wait, 0), c
}

// notRefused forgets the last refusal of key: a grant was committed.
func (m *memories) notRefused(key types.NamespacedName) {
	m.with(key, func(mem *memory) { mem.refusal = nil })
}

// endRestoredGrant ends a held grant that the API server's storage brought
// back from the past (an etcd restore): its Lease's version is not above
// the fence floor, a fence already published. A grant is checked against
// the floor when it is made; a restored one was made long ago, and with the
// heartbeat vouching for it nothing would write its Lease again for
// minutes: it would stay held, its holder's writes refused by every
// destination that saw the newer fence. Such a grant is revoked at once,
// with Degraded FenceRegression, and no grant is made until the store's
// revision passes the floor (grant). A cache that lags shows older versions
// too, so the Lease is read again from the API server before anything is
// decided: ok is false when nothing was brought back.
func (r *Reconciler) endRestoredGrant(ctx context.Context, s *scope, view holder.Lease) (res ctrl.Result, ok bool, err error) {
	floor := r.fenceFloor(s)
	if view.State != holder.StateHeld || !belowFloor(s.lease.ResourceVersion, floor) {
		return ctrl.Result{}, false, nil
	}
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.lease), live); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("read Lease %s again, its version below the fence floor %d: %w", klog.KObj(s.lease), floor, err)
	}
	if !belowFloor(live.ResourceVersion, floor) {
		s.stale = true // the cache lagged
		return ctrl.Result{}, true, nil
	}
	if v := holder.LeaseOf(live); v.State != holder.StateHeld {
		s.stale = true // changed since: the next look decides
		return ctrl.Result{}, true, nil
	}
	s.lease = live
	view = holder.LeaseOf(live)
	s.plan = holder.Plan{Action: holder.Revoke, Cause: holder.CauseRegression,
		Why: fmt.Sprintf("the Lease's version %s is not above fence %d, already published: the store went back in time", live.ResourceVersion, floor)}
	res, _ = r.checkFence(ctx, s, live.ResourceVersion, floor, ptr.Deref(live.Spec.HolderIdentity, ""))
	return res, true, r.revoke(ctx, s, view)
}

// belowFloor says whether resourceVersion rv is not above the fence floor.
func belowFloor(rv string, floor int64) bool {
	_, err := holder.CheckIncreases(rv, floor)
	var regression *holder.RegressionError
	return errors.As(err, &regression)
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
		r.mem.with(s.key, (*memory).storeWentBack)
	}
}

// leaseBehindCache returns the Lease to plan on: the cached one, or, while
// the cache is ahead of the store (checkCacheAhead), the API server's, until
// the cache holds that version or a newer one.
func (r *Reconciler) leaseBehindCache(ctx context.Context, key types.NamespacedName, cached *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if !r.mem.aheadOf(key, leaseCache) {
		return cached, nil
	}
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), live); err != nil {
		return nil, fmt.Errorf("read Lease %s from the API server, its cache being ahead of the store: %w", klog.KObj(cached), err)
	}
	if live.UID != cached.UID || !record.MaybeNewer(cached.ResourceVersion, live.ResourceVersion) {
		r.mem.caughtUp(key, leaseCache)
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
	m.wentBack = true
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
	if !m.wentBack {
		return nil
	}
	m.wentBack = false
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
func (r *Reconciler) fencedLeaseBehindCache(ctx context.Context, cached *fencingv1alpha1.FencedLease) (*fencingv1alpha1.FencedLease, error) {
	key := client.ObjectKeyFromObject(cached)
	if !r.mem.aheadOf(key, fencedLeaseCache) {
		return cached, nil
	}
	live := &fencingv1alpha1.FencedLease{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		return nil, fmt.Errorf("read FencedLease %s from the API server, its cache being ahead of the store: %w", klog.KObj(cached), err)
	}
	if live.UID != cached.UID || !record.MaybeNewer(cached.ResourceVersion, live.ResourceVersion) {
		r.mem.caughtUp(key, fencedLeaseCache)
		return cached, nil
	}
	r.mem.unwritten(key)
	return live, nil
}
