package fencedlease

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// conflictRetry is how soon to look again after another writer changed the
// Lease under us.
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
	return holder.Policy{
		LeaseDuration: duration,
		RenewInterval: renew,
		MaxHold:       time.Duration(fl.Spec.MaxHoldSeconds) * time.Second,
		Takeover:      takeover,
		Paused:        fl.Spec.Paused,
		PendingGrace:  pendingGrace,
	}
}

// reconcileGrant decides the next write to the Lease and makes it.
func (r *Reconciler) reconcileGrant(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.lease == nil {
		return ctrl.Result{}, nil
	}
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
	if apierrors.IsConflict(err) {
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

// revoke stops renewing the current grant: first the old holder is told it is
// a standby (best effort: it may be gone), then the Lease records the revoke.
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
// fence published before, and commits it. The commit is the point after which
// the grant may be published; a grant that fails before it stays pending and
// is superseded later.
func (r *Reconciler) grant(ctx context.Context, s *scope, old holder.Lease) (ctrl.Result, error) {
	target := s.plan.Target
	if old.State == holder.StateHeld {
		if old.HolderUID != target.UID {
			reason := fencingv1alpha1.EventLost
			if s.plan.Rotation {
				reason = fencingv1alpha1.EventRotated
			}
			r.event(ctx, s.fl, eventNormal, reason, "Grant of pod %s (fence %d) ended: %s", ptr.Deref(s.lease.Spec.HolderIdentity, ""), old.Fence, s.plan.Why)
		}
	}
	floor, err := r.fenceFloor(ctx, s)
	if err != nil {
		s.inputErr = err
		return ctrl.Result{}, err
	}
	l, err := r.writeGrant(ctx, s.lease, target, int32(policyOf(s.fl, r.PendingGrace).LeaseDuration/time.Second))
	if err != nil {
		return ctrl.Result{}, err
	}
	s.lease = l
	if old.State == holder.StateHeld {
		// The Lease no longer names the old holder, so nothing can publish
		// its fence again; tell it now that it is a standby.
		r.demoteHolder(ctx, s, old.HolderUID)
	}
	fence, err := holder.CheckIncreases(l.ResourceVersion, floor)
	var regression *holder.RegressionError
	switch {
	case errors.As(err, &regression):
		s.degraded = &condition{reason: fencingv1alpha1.ReasonFenceRegression, message: err.Error() + "; no grant is made until it is"}
		r.event(ctx, s.fl, eventWarning, fencingv1alpha1.EventFenceRegression,
			"Refused to grant pod %s: %s (was the API server's storage restored?)", target.Name, err)
		return ctrl.Result{RequeueAfter: regressionRetry}, nil
	case err != nil:
		s.degraded = &condition{reason: fencingv1alpha1.ReasonFenceUnavailable, message: err.Error()}
		return ctrl.Result{RequeueAfter: regressionRetry}, nil
	}
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

// demoteHolder tells the pod whose grant just ended that it is a standby. It
// runs after the Lease write that ended the grant, so that no operator
// replica can publish the old fence again (publishing reads the Lease live).
// It is best effort: the pod may be gone, and the publish step, which never
// publishes a new holder before every other pod is a standby, retries it.
func (r *Reconciler) demoteHolder(ctx context.Context, s *scope, uid types.UID) {
	for _, list := range [][]corev1.Pod{s.pods.selected, s.pods.stray} {
		for i := range list {
			if pod := &list[i]; pod.UID == uid {
				if err := r.publish(ctx, s.fl, pod, standbyAnnotations(s.fl.Name)); err != nil {
					ctrl.LoggerFrom(ctx).Info("Cannot demote the old holder yet", "pod", pod.Name, "err", err.Error())
				}
			}
		}
	}
}
