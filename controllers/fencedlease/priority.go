package fencedlease

import (
	"k8s.io/utils/ptr"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// PriorityRenewal is the queue priority of every reconcile of a FencedLease
// whose Lease carries a grant: held (the operator renews it, or checks that
// the holder does) or written and not yet committed. However many
// FencedLeases one operator serves, these go before the FencedLeases that
// hold nothing yet (priority 0, and controller-runtime's low priority for
// the initial list): a grant that expires because the operator was busy
// changes the fence under a healthy holder.
//
// The priority goes with the FencedLease, not with the step: the reconcile
// right after a grant, which publishes it and schedules its first renewal,
// counts as much as the renewals after it. At priority 0 it would wait
// behind every new FencedLease of a cold start while the grant's lease runs
// out.
const PriorityRenewal = 10

// priorityOf is the priority of the next reconcile of a FencedLease. The
// re-grant of a grant found expired goes at 0, behind the renewals of the
// grants still held (expiry.go).
func priorityOf(s *scope) *int {
	if carriesGrant(s) && (s.mem == nil || !s.mem.expired) {
		return ptr.To(PriorityRenewal)
	}
	return ptr.To(0)
}

// carriesGrant tells whether the Lease, as this reconcile left it, carries
// a grant to keep alive. A reconcile that read a lagging cache knows the
// Lease only through the status it recorded.
func carriesGrant(s *scope) bool {
	if s.lease == nil {
		return s.recorded.Holder != nil
	}
	switch holder.LeaseOf(s.lease).State {
	case holder.StateHeld, holder.StatePending:
		return true
	}
	return false
}

// keepsGrant tells whether the reconcile kept a held grant alive: renewed
// it, or found that it is not due yet (not a grant that waits to be
// replaced). Their share of the workers' time paces the renewals
// (internal/pace).
func keepsGrant(s *scope) bool {
	if s.plan.Action == holder.Renew {
		return true
	}
	return s.plan.Action == holder.Wait && !s.plan.Deferred && s.plan.Refusal == nil &&
		s.lease != nil && holder.LeaseOf(s.lease).State == holder.StateHeld
}
