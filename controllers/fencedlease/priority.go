package fencedlease

import (
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// PriorityTimer is the queue priority of a reconcile that a grant's timing
// asks for: renewing a held grant, ending a revoked one, superseding a
// pending one. However many FencedLeases one operator serves, these go
// before new grants, publications and retries (priority 0) and before the
// FencedLeases of a cold start (controller-runtime's low priority for the
// initial list), so that a busy operator never lets a healthy holder's grant
// expire.
const PriorityTimer = 10

// priorityOf is the priority of the next reconcile of a FencedLease.
func priorityOf(s *scope, res ctrl.Result) *int {
	if res.RequeueAfter > 0 && s.lease != nil && leaseView(s.lease).State != holder.StateFree {
		return ptr.To(PriorityTimer)
	}
	return ptr.To(0)
}
