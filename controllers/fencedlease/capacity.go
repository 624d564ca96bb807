package fencedlease

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
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

// neverGranted tells whether no grant of the FencedLease was ever recorded.
func neverGranted(fl *fencingv1alpha1.FencedLease) bool {
	return fl.Status.Fence == 0 && fl.Status.LeaseResourceVersion == ""
}

// waitedForCapacity tells whether the status says the FencedLease waits for
// capacity: written by this process, or by one before it.
func waitedForCapacity(fl *fencingv1alpha1.FencedLease) bool {
	c := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionHeld)
	return c != nil && c.Reason == fencingv1alpha1.ReasonWaitingForCapacity
}

// waitForCapacity is the whole reconcile of a FencedLease that never held
// a grant while the operator is saturated: no finalizer, no Lease, nothing
// but its status saying why it waits, written once. Every write it saved is
// one the API server can give to the renewals of the grants held; at ten
// thousand FencedLeases those first writes (a finalizer, a Lease, a status
// each) were as many as a minute of renewals.
func (r *Reconciler) waitForCapacity(ctx context.Context, fl *fencingv1alpha1.FencedLease) (ctrl.Result, error) {
	base := fl.DeepCopy()
	p := policyOf(fl, r.PendingGrace)
	s := &scope{fl: fl, plan: holder.Plan{Waiting: holder.WaitingForCapacity}}
	setHeld(s)
	setReady(s)
	result := ctrl.Result{RequeueAfter: p.LeaseDuration}
	if equality.Semantic.DeepEqual(base.Status, fl.Status) {
		return result, nil
	}
	err := r.Status().Patch(ctx, fl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("patch status of FencedLease %s: %w", klog.KObj(fl), err)
	}
	return result, nil
}
