package fencedlease

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// conflictRetry is how soon to look again after another writer changed the
// Lease under us, or a cache was seen lagging behind.
const conflictRetry = 200 * time.Millisecond

// regressionRetry is how soon to try again after a fence regression.
const regressionRetry = 10 * time.Second

// policyOf is the effective timing of a FencedLease, with defaults applied.
func policyOf(fl *fencingv1alpha1.FencedLease, pendingGrace time.Duration) holder.Policy {
	duration := time.Duration(fl.Spec.LeaseDurationSeconds) * time.Second
	if duration <= 0 {
		duration = 15 * time.Second
	}
	renew := duration / 3
	if fl.Spec.RenewIntervalSeconds != nil {
		renew = time.Duration(*fl.Spec.RenewIntervalSeconds) * time.Second
	}
	takeover := string(fl.Spec.Takeover)
	if takeover == "" {
		takeover = holder.TakeoverSafe
	}
	renewal := string(fl.Spec.Renewal)
	if renewal == "" {
		renewal = holder.RenewalOperator
	}
	return holder.Policy{
		LeaseDuration: duration,
		RenewInterval: renew,
		MaxHold:       time.Duration(fl.Spec.MaxHoldSeconds) * time.Second,
		Takeover:      takeover,
		Paused:        fl.Spec.Paused,
		PendingGrace:  pendingGrace,
		Renewal:       renewal,
	}
}

// reconcileGrant decides the next write to the Lease and makes it.
func (r *Reconciler) reconcileGrant(ctx context.Context, s *scope) (ctrl.Result, error) {
	view := leaseView(s.lease)
	committed := int64(0)
	if view.State == holder.StateHeld {
		committed = view.Fence
	}
	s.plan = holder.Decide(holder.Input{
		Policy:     policyOf(s.fl, r.PendingGrace),
		Lease:      view,
		Clock:      r.observations.observe(s.key, s.lease, committed),
		Candidates: s.pods.candidates,
	})
	log := ctrl.LoggerFrom(ctx)
	if s.plan.Action != holder.Wait {
		log.V(4).Info("Lease decision", "action", s.plan.Action, "target", s.plan.Target.Name, "why", s.plan.Why)
	}
	result := ctrl.Result{RequeueAfter: s.plan.RequeueAfter}
	var err error
	switch s.plan.Action {
	case holder.Renew:
		err = r.renew(ctx, s)
	case holder.Revoke:
		err = r.revoke(ctx, s, view)
	case holder.Grant:
		result, err = r.grant(ctx, s, view)
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		log.V(4).Info("Lease changed under us; looking again", "err", err.Error())
		s.stale = true
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return result, err
}

func (r *Reconciler) renew(ctx context.Context, s *scope) error {
	l, err := r.renewLease(ctx, s.lease)
	if err != nil {
		return err
	}
	s.lease = l
	r.observations.confirmed(s.key, l, leaseView(l).Fence, false)
	return nil
}

// revoke stops renewing the current grant: the Lease records the revocation,
// then the old holder is told that it is a standby (best effort: it may be
// gone).
func (r *Reconciler) revoke(ctx context.Context, s *scope, view holder.Lease) error {
	l, err := r.revokeLease(ctx, s.lease)
	if err != nil {
		return err
	}
	s.lease = l
	r.demoteHolder(ctx, s, view.HolderUID)
	name := ptr.Deref(l.Spec.HolderIdentity, "")
	if s.plan.Rotation {
		r.event(ctx, s.fl, eventNormal, fencingv1alpha1.EventRotated, "Revoked the grant of pod %s (fence %d): %s", name, view.Fence, s.plan.Why)
	} else {
		r.event(ctx, s.fl, eventWarning, fencingv1alpha1.EventLost, "Pod %s lost the lease (fence %d): %s", name, view.Fence, s.plan.Why)
	}
	return nil
}

// grant writes a fresh grant, checks that its fence is greater than every
// fence published before, and commits it. The floor is checked before the
// write too, so that a storage that went back in time does not even end the
// current grant. The commit is the point after which the grant may be
// published; a grant that fails before it stays pending and is superseded.
func (r *Reconciler) grant(ctx context.Context, s *scope, old holder.Lease) (ctrl.Result, error) {
	target := s.plan.Target
	floor := r.fenceFloor(s)
	if res, regressed := r.checkFence(ctx, s, s.lease.ResourceVersion, floor, target.Name); regressed {
		// No grant can be made, but the current one ends all the same: its
		// holder is lost, rotated away, or its grant expired unrenewed.
		if old.State == holder.StateHeld {
			return res, r.revoke(ctx, s, old)
		}
		return res, nil
	}
	policy := policyOf(s.fl, r.PendingGrace)
	l, err := r.writeGrant(ctx, s.lease, target, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.lease = l
	if old.State == holder.StateReleased {
		r.event(ctx, s.fl, eventNormal, fencingv1alpha1.EventReleased, "Pod %s released the grant with fence %d", ptr.Deref(s.lease.Spec.HolderIdentity, ""), old.Fence)
	}
	if old.State == holder.StateHeld && old.HolderUID != target.UID {
		reason := fencingv1alpha1.EventLost
		if s.plan.Rotation {
			reason = fencingv1alpha1.EventRotated
		}
		r.event(ctx, s.fl, eventNormal, reason, "Grant of pod %s (fence %d) ended: %s", ptr.Deref(s.lease.Spec.HolderIdentity, ""), old.Fence, s.plan.Why)
		// The Lease no longer names the old holder; tell it that it is a
		// standby now.
		r.demoteHolder(ctx, s, old.HolderUID)
	}
	if res, regressed := r.checkFence(ctx, s, l.ResourceVersion, floor, target.Name); regressed {
		return res, nil
	}
	fence, _ := holder.FenceFromResourceVersion(l.ResourceVersion)
	l, err = r.commitGrant(ctx, l, fence)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.lease = l
	r.observations.confirmed(s.key, l, fence, true)
	r.event(ctx, s.fl, eventNormal, fencingv1alpha1.EventGranted, "Granted the lease to pod %s with fence %d (%s)", target.Name, fence, s.plan.Why)
	// The status patch of this reconcile records the fence; the next one
	// publishes it to the pod.
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// checkFence refuses a resourceVersion that is not greater than the fence
// floor (Degraded FenceRegression and a Warning event) or that is no number
// at all (Degraded FenceUnavailable).
func (r *Reconciler) checkFence(ctx context.Context, s *scope, rv string, floor int64, target string) (ctrl.Result, bool) {
	_, err := holder.CheckIncreases(rv, floor)
	var regression *holder.RegressionError
	switch {
	case err == nil:
		return ctrl.Result{}, false
	case errors.As(err, &regression):
		s.degraded = &condition{reason: fencingv1alpha1.ReasonFenceRegression, message: err.Error() + "; no grant is made until it is"}
		r.event(ctx, s.fl, eventWarning, fencingv1alpha1.EventFenceRegression,
			"Refused to grant pod %s: %s (was the API server's storage restored?)", target, err)
	default:
		s.degraded = &condition{reason: fencingv1alpha1.ReasonFenceUnavailable, message: err.Error()}
	}
	return ctrl.Result{RequeueAfter: regressionRetry}, true
}

// demoteHolder tells the pod whose grant just ended that it is a standby. It
// runs after the Lease write that ended the grant, on the version of the pod
// the reconcile read. It is best effort: the pod may be gone or changed, and
// the next reconcile, or the next publication, demotes it anyway.
func (r *Reconciler) demoteHolder(ctx context.Context, s *scope, uid types.UID) {
	for _, pod := range s.pods.all() {
		if pod.UID != uid {
			continue
		}
		action := holder.Standby
		if !s.pods.candidate(uid) {
			action = holder.Clear
		}
		if err := r.writePod(ctx, s.fl, pod, action, 0, pod.ResourceVersion); err != nil {
			ctrl.LoggerFrom(ctx).Info("Cannot demote the old holder yet", "pod", pod.Name, "err", err.Error())
		}
	}
}
