package fencedlease

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// behindRenewals is how soon the re-grant of a grant found expired is
// queued, at priority 0: behind every renewal that is due.
const behindRenewals = time.Millisecond

// expiries remembers the FencedLeases whose grant the operator found expired
// unrenewed, and whose re-grant waits behind the renewals of the grants
// still held.
type expiries struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]bool
}

// mark remembers key, and tells whether it was not remembered before.
func (e *expiries) mark(key types.NamespacedName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byKey == nil {
		e.byKey = map[types.NamespacedName]bool{}
	}
	if e.byKey[key] {
		return false
	}
	e.byKey[key] = true
	return true
}

// has tells whether key waits for its re-grant.
func (e *expiries) has(key types.NamespacedName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byKey[key]
}

// forget forgets key: its grant is not expired (any more), or it is gone.
func (e *expiries) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}

// deferExpired puts the re-grant of a grant that the operator renews, and
// found expired unrenewed, behind the renewals of the grants still held: the
// reconcile that finds it writes nothing and queues the FencedLease again at
// priority 0, and the re-grant is made there.
//
// An operator past its capacity that re-granted in the reconcile that found
// the expiry, at the renewals' priority, never recovered from a slow moment
// of its API server: each re-grant is the writes of a grant, those made more
// renewals late, and they expired in turn. A 10,000-lease run churned 1,818
// grants in ten minutes that way; the simulation in internal/pace shows the
// same, and its recovery with the re-grants behind. The grant is lost either
// way; its holder keeps the newest fence until the re-grant, so nothing
// older can write in between. The operator counts the expiry at once
// (pace.Expired), which stops first grants for a while.
func (r *Reconciler) deferExpired(ctx context.Context, s *scope, now time.Time) {
	if s.plan.Cause != holder.CauseExpired {
		r.expiries.forget(s.key)
		s.behind = false
		return
	}
	s.behind = true
	if !r.expiries.mark(s.key) {
		return
	}
	r.pace.Expired(now)
	ctrl.LoggerFrom(ctx).V(1).Info("Grant expired unrenewed; re-granting it behind the renewals of the grants still held")
	s.deferred = true
}
