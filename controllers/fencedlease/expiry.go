package fencedlease

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// behindRenewals is how soon the re-grant of a grant found expired is
// queued, at priority 0: behind every renewal that is due.
const behindRenewals = time.Millisecond

// markExpired remembers that key's grant was found expired unrenewed and
// its re-grant waits behind the renewals of the grants still held; it tells
// whether it was not remembered before.
func (m *memories) markExpired(key types.NamespacedName) (first bool) {
	m.with(key, func(mem *memory) { first, mem.expired = !mem.expired, true })
	return first
}

// expired tells whether key's re-grant waits behind the renewals.
func (m *memories) expired(key types.NamespacedName) (expired bool) {
	m.with(key, func(mem *memory) { expired = mem.expired })
	return expired
}

// notExpired forgets that key's grant was found expired: it is not (any
// more).
func (m *memories) notExpired(key types.NamespacedName) {
	m.with(key, func(mem *memory) { mem.expired = false })
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
		r.mem.notExpired(s.key)
		s.behind = false
		return
	}
	s.behind = true
	if !r.mem.markExpired(s.key) {
		return
	}
	r.pace.expired(now)
	ctrl.LoggerFrom(ctx).V(1).Info("Grant expired unrenewed; re-granting it behind the renewals of the grants still held")
	s.deferred = true
}
