package fencedlease

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

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

// firstRenewal is the interval to the first renewal of a grant that this
// process did not write, spread by FencedLease between a quarter and all of
// interval. A process that starts counts every grant it finds as renewed
// when it first sees it (clock.go), and sees thousands of them within the
// seconds of its initial list: renewed after the full interval, they would
// all fall due together, with the lease's remainder to renew them all in.
// Spread, the first round of renewals starts as soon as they are seen, and
// has nearly the whole lease.
func firstRenewal(key types.NamespacedName, interval time.Duration) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.String()))
	u := float64(h.Sum32()) / (1 << 32)
	return time.Duration((0.25 + 0.75*u) * float64(interval))
}

// reconcileGrant decides the next write to the Lease and makes it, in
// three parts: gather what the decision needs (the grant as recorded, this
// process's clock of it, the timing as paced, a handoff request, the
// operator's gates), decide (holder.Decide, pure: the plan the Lease calls
// for, passed through the gates in order), and apply the plan, each write a
// compare-and-swap on the Lease as read.
func (r *Reconciler) reconcileGrant(ctx context.Context, s *scope) (ctrl.Result, error) {
	res, err := r.decideAndApply(ctx, s)
	if err == nil && s.next != stale && unsaved(s.lease) {
		// Nothing was granted: the Lease is created as it is.
		if err = r.saveLease(ctx, s.lease); errors.Is(err, errLeaseLagging) {
			s.found(stale)
			err = nil
		}
	}
	return res, err
}

func (r *Reconciler) decideAndApply(ctx context.Context, s *scope) (ctrl.Result, error) {
	in, err := r.gatherGrant(ctx, s)
	if err != nil || s.next == stale {
		return ctrl.Result{}, err
	}
	s.plan = holder.Decide(in.decision)
	r.planned(ctx, s, in)
	if s.plan.Deferred {
		return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
	}
	return r.applyGrant(ctx, s, in)
}

// grantInputs are what a grant decision is made on.
type grantInputs struct {
	decision holder.Input
	view     holder.Lease
	clk      holder.Clock
	// policy is the spec's timing; paced the timing the pace renews at.
	policy, paced holder.Policy
	// handoff is the handoff request not handled yet, if pending.
	handoff string
	pending bool
	// admitted says that a first grant was taken from the budget when the
	// gates were read (pacer.admit): planned gives it back unless the plan
	// spends it.
	admitted bool
}

// gatherGrant reads the grant as the Lease records it, observes it on this
// process's clock, and works out the timing, any handoff request and the
// operator's gates. A held grant whose version is below the fence floor is
// read again from the API server first (readRestored).
func (r *Reconciler) gatherGrant(ctx context.Context, s *scope) (grantInputs, error) {
	floor := r.fenceFloor(s)
	if err := r.readRestored(ctx, s, floor); err != nil || s.next == stale {
		return grantInputs{}, err
	}
	in := grantInputs{view: holder.LeaseOf(s.lease), policy: r.policyOf(s.fl)}
	committed := int64(0)
	if in.view.State == holder.StateHeld {
		committed = in.view.Fence
	}
	var renewed bool
	in.clk, renewed = s.mem.observe(s.lease, committed, r.Clock.Now())
	if err := r.vouchedClock(ctx, s, in.view, in.policy, &in.clk); err != nil {
		return in, err
	}
	if renewed && in.view.State == holder.StateHeld && in.view.Renewal == holder.RenewalHolder {
		s.outcome.renewed = holder.RenewalHolder
	}
	in.handoff, in.pending = handoffRequest(s)
	in.paced = in.policy
	in.paced.RenewInterval = r.pace.renewInterval(in.policy)
	if s.mem.inherited {
		in.paced.RenewInterval = firstRenewal(s.key, in.paced.RenewInterval)
	}
	in.decision = holder.Input{
		Policy:           in.paced,
		Lease:            in.view,
		Clock:            in.clk,
		Candidates:       s.pods.candidates,
		HandoffRequested: in.pending,
		Gates:            r.gates(s, in.view, floor, in.clk.Now),
	}
	in.admitted = in.view.State == holder.StateFree && in.decision.Gates.Closed == ""
	return in, nil
}

// gates are what this operator holds a FencedLease's plan to: the fence
// floor, a refusal still waited out, its admission of first grants, and
// whether it deferred the current grant's expiry already. Admission takes
// the first grant from the budget as it answers, so that workers deciding
// at the same instant cannot all be admitted on the last one; planned
// gives it back if the plan makes no grant.
func (r *Reconciler) gates(s *scope, view holder.Lease, floor int64, now time.Time) holder.Gates {
	g := holder.Gates{Floor: floor, DeferExpiry: !s.mem.expired}
	if !unsaved(s.lease) {
		g.LeaseVersion = s.lease.ResourceVersion
	}
	g.RefusedFor, g.Refused = s.mem.stillRefused(now)
	if view.State == holder.StateFree {
		g.Closed = r.pace.admit(now)
	}
	return g
}

// policyOf is the FencedLease's policy for this operator: with its
// heartbeat's name and refresh when the heartbeat vouches for grants of
// that lease duration and is being renewed. While it is not (it cannot be
// written, or this process has not seen it yet), grants are renewed on
// their own Leases, which takes them off the heartbeat until it is renewed
// again: a failing heartbeat costs what renewals without one cost, never a
// grant.
func (r *Reconciler) policyOf(fl *fencingv1alpha1.FencedLease) holder.Policy {
	p := policyOf(fl, r.PendingGrace)
	if r.Heartbeat.vouchesFor(p.LeaseDuration) && r.mem.beatHealthy(r.Clock.Now(), r.Heartbeat.Interval) {
		p.Voucher, p.Refresh = r.Heartbeat.voucher(), r.Heartbeat.Refresh
	}
	return p
}

// vouchedClock adds the heartbeat to the clock of a grant it vouches for:
// while the grant is held, its last renewal is the heartbeat's last one
// seen, if later than the grant's own; once it has ended, the latest time
// the heartbeat may have renewed it before the end (creditAfterEnd, worked
// out once per grant). The watchdog learns which grants it vouches for.
func (r *Reconciler) vouchedClock(ctx context.Context, s *scope, view holder.Lease, p holder.Policy, clk *holder.Clock) error {
	if r.Heartbeat == nil || view.VouchedBy != r.Heartbeat.voucher() || view.Renewal == holder.RenewalHolder {
		s.mem.vouchedFor = 0
		return nil
	}
	switch view.State {
	case holder.StateHeld:
		r.lookAtBeat(ctx)
		r.mem.catchUp(s.mem)
		if b := r.mem.lastBeat(); b.changedAt.After(clk.RenewedAt) {
			clk.RenewedAt = b.changedAt
		}
		s.mem.vouchedFor = p.LeaseDuration
		return nil
	case holder.StateRevoked, holder.StateReleased:
		s.mem.vouchedFor = 0
		credit, ok := s.mem.endCredit(s.lease)
		if !ok {
			var err error
			if credit, err = r.creditAfterEnd(ctx, s.lease.ResourceVersion); err != nil {
				return err
			}
			s.mem.setEndCredit(s.lease, credit)
		}
		if credit.After(clk.RenewedAt) {
			clk.RenewedAt = credit
		}
	default:
		s.mem.vouchedFor = 0
	}
	return nil
}

// planned keeps this process's account of the plan before it is applied:
// the first grants' budget it spends (a first grant's was taken when it was
// admitted, and is given back if the plan does not spend it), whether its
// re-grant waits behind the renewals, and the outcome for the metrics.
func (r *Reconciler) planned(ctx context.Context, s *scope, in grantInputs) {
	switch {
	case s.plan.Spends && !in.admitted:
		r.pace.spend(in.clk.Now)
	case !s.plan.Spends && in.admitted:
		r.pace.giveBack(in.clk.Now)
	}
	s.mem.expired = s.plan.Behind
	if s.plan.Deferred {
		r.pace.expired(in.clk.Now)
		ctrl.LoggerFrom(ctx).V(1).Info("Grant expired unrenewed; re-granting it behind the renewals of the grants still held")
		return
	}
	s.outcome.waiting = waitingForLease(s)
	if s.plan.Cause == holder.CauseStoppedRenewing {
		s.outcome.renewFailed = holder.RenewalHolder
	}
	if s.plan.Action != holder.Wait {
		ctrl.LoggerFrom(ctx).V(4).Info("Lease decision", "action", s.plan.Action, "target", s.plan.Target.Name, "why", s.plan.Why)
	}
}

// applyGrant makes the write the plan calls for. A write that finds the
// Lease changed (a conflict) or gone marks the reconcile stale: nothing
// more is done, and the next look starts over.
func (r *Reconciler) applyGrant(ctx context.Context, s *scope, in grantInputs) (ctrl.Result, error) {
	result := ctrl.Result{RequeueAfter: s.plan.RequeueAfter}
	if s.plan.Waiting == holder.WaitingForCapacity {
		result.RequeueAfter = r.pace.retry(s.key, in.clk.Now, in.policy.LeaseDuration)
	}
	if s.plan.Refusal != nil {
		r.refuse(ctx, s, s.plan.Refusal)
	}
	var err error
	switch s.plan.Action {
	case holder.Renew:
		if err = r.renew(ctx, s, in.policy); err != nil {
			s.outcome.renewFailed = holder.RenewalOperator
		} else {
			r.pace.renewed(in.clk, in.paced.RenewInterval, in.policy)
		}
	case holder.Revoke:
		err = r.revoke(ctx, s, in.view)
	case holder.Grant:
		result, err = r.grant(ctx, s, in.view, in.decision.Gates.Floor)
	case holder.Drop:
		err = r.drop(ctx, s)
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		ctrl.LoggerFrom(ctx).V(4).Info("Lease changed under us; looking again", "err", err.Error())
		s.found(stale)
		if apierrors.IsConflict(err) && !unsaved(s.lease) {
			r.checkCacheAhead(ctx, s)
		}
		return ctrl.Result{}, nil
	case err != nil || s.next == stale:
		return result, err
	}
	if in.pending {
		r.handledHandoff(ctx, s, in.handoff)
	}
	if s.mem.expired && s.plan.Action != holder.Wait {
		// Re-granted (or revoked): the reconcile after it publishes the new
		// grant and schedules its renewals, at their priority.
		s.mem.expired = false
	}
	return result, nil
}

func (r *Reconciler) renew(ctx context.Context, s *scope, p holder.Policy) error {
	l, err := r.renewLease(ctx, s.lease, p)
	if err != nil {
		return err
	}
	s.outcome.renewed = holder.RenewalOperator
	s.lease = l
	s.mem.confirmed(l, holder.LeaseOf(l).Fence, false, r.Clock.Now())
	return nil
}

// revoke stops renewing the current grant: the Lease records the revocation,
// then the old holder is told that it is a standby (best effort: it may be
// gone).
func (r *Reconciler) revoke(ctx context.Context, s *scope, view holder.Lease) error {
	held := s.mem.heldFor(r.Clock.Now())
	l, err := r.revokeLease(ctx, s.lease, handoffMark(s))
	if err != nil {
		return err
	}
	s.lease = l
	name := ptr.Deref(l.Spec.HolderIdentity, "")
	r.grantEnded(ctx, s, name, view, held)
	r.demoteHolder(ctx, s, view.HolderUID, view.Fence, 0)
	return nil
}

// drop lets go of a deleted Lease whose grant is over. The re-created Lease
// is the next reconcile's: look again soon.
func (r *Reconciler) drop(ctx context.Context, s *scope) error {
	l, err := r.dropLease(ctx, s.lease)
	if err != nil {
		return err
	}
	s.mem.letGo(l)
	s.lease = l
	ctrl.LoggerFrom(ctx).Info("Let go of the deleted Lease: its grant is over", "lease", klog.KObj(l))
	s.found(lookAgain)
	return nil
}

// grantEnded counts and reports the end of a committed grant.
func (r *Reconciler) grantEnded(ctx context.Context, s *scope, pod string, old holder.Lease, held time.Duration) {
	cause := s.plan.Cause
	if cause == "" {
		cause = holder.CauseExpired
	}
	s.outcome.ended, s.outcome.heldFor = cause, held
	t := transition{eventType: eventWarning, reason: fencingv1alpha1.EventLost, pod: pod, fence: old.Fence, duration: held, outcome: cause}
	switch {
	case cause == holder.CauseReleased:
		t.eventType, t.reason = eventNormal, fencingv1alpha1.EventReleased
		t.message = fmt.Sprintf("Pod %s released its grant with fence %d after %s", pod, old.Fence, round(held))
	case s.plan.Rotation:
		t.eventType, t.reason = eventNormal, fencingv1alpha1.EventRotated
		t.message = fmt.Sprintf("Ended the grant of pod %s (fence %d) after %s: %s", pod, old.Fence, round(held), s.plan.Why)
	default:
		t.message = fmt.Sprintf("Pod %s lost the lease (fence %d) after %s: %s", pod, old.Fence, round(held), s.plan.Why)
	}
	r.transition(ctx, s.fl, t)
}

// grant writes a fresh grant, checks that its fence is greater than every
// fence published before, and commits it. The commit is the point after
// which the grant may be published; a grant that fails before it stays
// pending and is superseded. (The checks before the write are the plan's:
// holder's gates.)
func (r *Reconciler) grant(ctx context.Context, s *scope, old holder.Lease, floor int64) (ctrl.Result, error) {
	target := s.plan.Target
	policy := r.policyOf(s.fl)
	oldName, held := ptr.Deref(s.lease.Spec.HolderIdentity, ""), s.mem.heldFor(r.Clock.Now())
	// The first grant of a FencedLease whose status, as read, never
	// recorded one (publishFirst).
	created := unsaved(s.lease) && s.recorded.Fence == 0 && s.recorded.Holder == nil
	l, err := r.writeGrant(ctx, s.lease, target, policy, handoffMark(s))
	if err != nil {
		return ctrl.Result{}, err
	}
	s.lease = l
	if old.State == holder.StateReleased || (old.State == holder.StateHeld && (old.HolderUID != target.UID || s.plan.Cause != "")) {
		r.grantEnded(ctx, s, oldName, old, held)
	}
	refusal := holder.CheckFloor(l.ResourceVersion, floor)
	regressed := refusal != nil
	fence, _ := holder.FenceFromResourceVersion(l.ResourceVersion)
	var steps []func(context.Context)
	if old.State == holder.StateHeld && old.HolderUID != target.UID {
		// The Lease no longer names the old holder; tell it that it is a
		// standby now, marked with the new grant: written after the grant,
		// the mark is what step 3 of the grant's publication would write
		// (publishHolder), which then leaves the pod alone, one write
		// fewer on the way to the new holder.
		mark := fence
		if regressed {
			mark = 0
		}
		steps = append(steps, func(ctx context.Context) { r.demoteHolder(ctx, s, old.HolderUID, old.Fence, mark) })
	}
	if regressed {
		r.refuse(ctx, s, refusal)
		r.concurrently(ctx, steps...)
		return ctrl.Result{RequeueAfter: holder.RegressionRetry}, nil
	}
	// The demotion and the commit write different objects and neither
	// needs the other's result: they run at once, one round trip instead
	// of two (docs/design.md, "The demotion runs beside the commit"). The
	// publication follows both.
	var committed *coordinationv1.Lease
	steps = append(steps, func(ctx context.Context) { committed, err = r.commitGrant(ctx, l, fence, policy) })
	r.concurrently(ctx, steps...)
	if err != nil {
		return ctrl.Result{}, err
	}
	l = committed
	s.lease, s.created = l, created
	s.mem.confirmed(l, fence, true, r.Clock.Now())
	s.mem.refusal = nil
	s.outcome.granted = true
	r.transition(ctx, s.fl, transition{eventType: eventNormal, reason: fencingv1alpha1.EventGranted, pod: target.Name, fence: fence,
		outcome: s.plan.Why, message: fmt.Sprintf("Granted the lease to pod %s with fence %d (%s)", target.Name, fence, s.plan.Why)})
	// The status patch of this reconcile records the fence, and the
	// reconcile then publishes it to the pod (recordAndPublish); the next
	// one finishes what that could not.
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// refuse records a grant refused for its fence: Degraded FenceRegression
// and a Warning event, or Degraded FenceUnavailable for a version that is
// no number at all. A refusal the plan only waits out sets the condition
// again.
func (r *Reconciler) refuse(ctx context.Context, s *scope, refusal *holder.Refusal) {
	s.degraded = &condition{reason: refusal.Reason, message: refusal.Message()}
	if !refusal.Made || refusal.Reason != fencingv1alpha1.ReasonFenceRegression {
		return
	}
	target := s.plan.Target.Name
	if target == "" {
		target = ptr.Deref(s.lease.Spec.HolderIdentity, "")
	}
	s.outcome.regression = true
	s.mem.refused(*refusal, r.Clock.Now())
	r.event(ctx, s.fl, eventWarning, fencingv1alpha1.EventFenceRegression,
		"Refused to grant pod %s: %s (was the API server's storage restored?)", target, refusal.Err)
}

// demoteHolder tells the pod whose grant just ended that it is a standby. It
// runs after the Lease write that ended the grant, on the version of the pod
// the reconcile read. It is best effort: the pod may be gone or changed, and
// the next reconcile, or the next publication, demotes it anyway. A pod
// that carries nothing of this FencedLease (it moved on to another one,
// which may have published it as its holder) is left alone: clearing it
// would clear the other FencedLease's publication.
func (r *Reconciler) demoteHolder(ctx context.Context, s *scope, uid types.UID, fence, grant int64) {
	for _, pod := range s.pods.all() {
		if pod.UID != uid || publicationOf(pod, s.fl.Name).Bare() {
			continue
		}
		action := holder.Standby
		if !s.pods.candidate(uid) {
			action = holder.Clear
		}
		if err := r.writePod(ctx, s.fl, pod, action, grant, pod.ResourceVersion); err != nil {
			ctrl.LoggerFrom(ctx).Info("Cannot demote the old holder yet", "pod", pod.Name, "err", err.Error())
			continue
		}
		if err := r.syncHolderCondition(ctx, pod, false); err != nil {
			ctrl.LoggerFrom(ctx).Info("Cannot set the old holder's condition yet", "pod", pod.Name, "err", err.Error())
		}
		r.podEvent(pod, s.fl, eventNormal, fencingv1alpha1.EventHolderLost, "Demote",
			"No longer holds FencedLease %s: its grant with fence %d ended (%s)", s.fl.Name, fence, s.plan.Why)
	}
}
