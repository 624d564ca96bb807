package fencedlease

import (
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// PriorityRenewal is the queue priority of a reconcile that keeps a held
// grant alive: the renewal of a grant the operator renews, or the check that
// a holder renewing its own grant still does. However many FencedLeases one
// operator serves, these go before new grants, publications, revocations and
// retries (priority 0), and before the FencedLeases of a cold start
// (controller-runtime's low priority for the initial list): a grant that
// expires because the operator was busy changes the fence under a healthy
// holder.
const PriorityRenewal = 10

// priorityOf is the priority of the next reconcile of a FencedLease.
func priorityOf(s *scope, res ctrl.Result) *int {
	renewing := s.plan.Action == holder.Renew || s.plan.Action == holder.Wait && s.lease != nil && leaseView(s.lease).State == holder.StateHeld
	if res.RequeueAfter > 0 && renewing {
		return ptr.To(PriorityRenewal)
	}
	return ptr.To(0)
}
