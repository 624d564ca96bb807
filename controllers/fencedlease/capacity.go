package fencedlease

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// waitsForCapacity tells whether a FencedLease waits for capacity before
// anything is written for it: it never held a grant, and the operator
// admits no first grant now, or it was left waiting by a process before
// this one, which has not measured its load for long enough yet.
func (r *Reconciler) waitsForCapacity(fl *fencingv1alpha1.FencedLease, now time.Time) bool {
	if !neverGranted(fl) {
		return false
	}
	if !r.pace.admits(now) {
		return true
	}
	return waitedForCapacity(fl) && r.pace.untilMeasured(now) > 0
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
// a grant while the operator admits none: no finalizer, no Lease, nothing
// but its status saying why it waits, written once. Every write it saved is
// one the API server can give to the renewals of the grants held; at ten
// thousand FencedLeases those first writes (a finalizer, a Lease, a status
// each) were as many as a minute of renewals.
//
// Its look is a reconcile like any other for the pace: it starts the time
// the pace measures the load in. A restarted operator whose FencedLeases all
// wait (a previous process left them so) would otherwise never measure, and
// never grant one. A FencedLease that waits only for that measure looks
// again as soon as it is done.
func (r *Reconciler) waitForCapacity(ctx context.Context, fl *fencingv1alpha1.FencedLease) (ctrl.Result, error) {
	now := r.Clock.Now()
	r.pace.worked(now, 0, false)
	base := fl.DeepCopy()
	p := policyOf(fl, r.PendingGrace)
	s := &scope{fl: fl, plan: holder.Plan{Waiting: holder.WaitingForCapacity}}
	setHeld(s)
	setReady(s)
	result := ctrl.Result{RequeueAfter: p.LeaseDuration}
	if r.pace.admits(now) {
		// Waiting only for the load to be measured.
		result.RequeueAfter = min(result.RequeueAfter, r.pace.untilMeasured(now)+time.Millisecond)
	} else {
		result.RequeueAfter = r.pace.retry(client.ObjectKeyFromObject(fl), now, p.LeaseDuration)
	}
	r.pace.report(ctx)
	if equality.Semantic.DeepEqual(base.Status, fl.Status) {
		return result, nil
	}
	err := r.Status().Patch(ctx, fl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("patch status of FencedLease %s: %w", klog.KObj(fl), err)
	}
	return result, nil
}
