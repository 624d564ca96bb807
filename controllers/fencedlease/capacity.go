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

// admit lets a FencedLease's first grant wait while the operator has no
// margin left to renew more grants (internal/pace): granting it would add
// renewals that could not be made on time, and the grants that expired for
// it would change the fence under healthy holders. Takeovers and re-grants
// of a FencedLease that held before go ahead: they replace a grant, they
// add none; but they spend from the first grants' budget, so that first
// grants wait while they happen. A waiting FencedLease looks again a lease
// duration later, or at the next event: thousands of them looking every
// few seconds would take the workers' time that the renewals need.
func (r *Reconciler) admit(s *scope, l holder.Lease, p holder.Policy, now time.Time) {
	if s.plan.Action != holder.Grant {
		return
	}
	if l.State != "" {
		r.pace.Spend(now)
		return
	}
	if ok, why := r.pace.Admit(now); !ok {
		s.plan = holder.Plan{Action: holder.Wait, Waiting: holder.WaitingForCapacity, RequeueAfter: p.LeaseDuration, Why: why}
	}
}

// waitsForCapacity tells whether a FencedLease waits for capacity before
// anything is written for it: it never held a grant, and the operator
// admits no first grant now, or it was left waiting by a process before
// this one, which has not measured its load for long enough yet.
func (r *Reconciler) waitsForCapacity(fl *fencingv1alpha1.FencedLease, now time.Time) bool {
	if !neverGranted(fl) {
		return false
	}
	if ok, _ := r.pace.Admits(now); !ok {
		return true
	}
	return waitedForCapacity(fl) && !r.pace.Measured(now)
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
func (r *Reconciler) waitForCapacity(ctx context.Context, fl *fencingv1alpha1.FencedLease) (ctrl.Result, error) {
	base := fl.DeepCopy()
	p := policyOf(fl, r.PendingGrace)
	s := &scope{fl: fl, plan: holder.Plan{Waiting: holder.WaitingForCapacity}}
	setHeld(s)
	setReady(s)
	result := ctrl.Result{RequeueAfter: p.LeaseDuration}
	r.reportPace()
	if equality.Semantic.DeepEqual(base.Status, fl.Status) {
		return result, nil
	}
	err := r.Status().Patch(ctx, fl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("patch status of FencedLease %s: %w", klog.KObj(fl), err)
	}
	return result, nil
}

// reportPace sets the pace's series and logs each time first grants stop
// or start being admitted, with the reason: the operator's one word on why
// new FencedLeases wait.
func (r *Reconciler) reportPace() {
	st := r.pace.Status()
	renewalShareGauge.Set(st.Share)
	renewalStretchGauge.Set(st.Stretch)
	saturatedGauge.Set(map[bool]float64{true: 0, false: 1}[st.Admitting])
	firstGrantRateGauge.Set(st.Rate)
	renewalLatenessGauge.Set(st.Peak)
	if r.admitting.Swap(st.Admitting) == st.Admitting {
		return
	}
	log := ctrl.Log.WithName("pace")
	if st.Admitting {
		log.Info("Admitting first grants again", "ratePerSecond", st.Rate, "share", st.Share, "stretch", st.Stretch)
		return
	}
	log.Info("First grants wait: "+st.Why, "ratePerSecond", st.Rate, "share", st.Share, "stretch", st.Stretch, "lateness", st.Peak)
}
