package fencedlease

import (
	"github.com/fencedlease/fencedlease/internal/holder"
)

// admit lets a FencedLease's first grant wait while the operator renews as
// many grants as it can (internal/pace): granting it would add renewals
// that cannot be made on time, and the grants that expired for it would
// change the fence under healthy holders. Takeovers and re-grants of a
// FencedLease that held before go ahead: they replace a grant, they add
// none. A waiting FencedLease looks again a lease duration later, or at the
// next event: thousands of them looking every few seconds would take the
// workers' time that the renewals need.
func (r *Reconciler) admit(s *scope, l holder.Lease, p holder.Policy) {
	if s.plan.Action != holder.Grant || l.State != "" || !r.pace.Saturated() {
		return
	}
	s.plan = holder.Plan{Action: holder.Wait, Waiting: holder.WaitingForCapacity, RequeueAfter: p.LeaseDuration,
		Why: "the operator renews as many grants as it can"}
}
