package fencedlease

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// planStatus computes the status a reconcile records, and says whether it
// needs a write: nothing is written when the inputs were found stale, when
// the reconcile only put a re-grant behind the renewals (expiry.go), or
// when nothing changed. observedGeneration is bumped only when the
// reconcile succeeded.
func (r *Reconciler) planStatus(ctx context.Context, base *fencingv1alpha1.FencedLease, s *scope, ok bool) bool {
	if s.next == stale || s.plan.Deferred {
		return false
	}
	r.computeStatus(ctx, s)
	if ok {
		s.fl.Status.ObservedGeneration = s.fl.Generation
	}
	return !equality.Semantic.DeepEqual(base.Status, s.fl.Status)
}

// writeStatus is the one status write of a reconcile: fl, which carries the
// planned status, patched from base. It touches nothing of the reconcile's
// scope, so that a publication's reads can run beside it.
//
// The status is a record, never a view: the fencing webhook trusts it. So
// the patch carries the resourceVersion of the FencedLease as read (a late
// patch from an earlier reconcile, or one based on a lagging cache, fails
// instead of overwriting a newer record). recorded says that the status
// now records what was planned; a conflict asks for another look soon.
func (r *Reconciler) writeStatus(ctx context.Context, mem *memory, base, fl *fencingv1alpha1.FencedLease) (recorded, requeue bool, err error) {
	err = r.Status().Patch(ctx, fl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		ctrl.LoggerFrom(ctx).V(4).Info("FencedLease changed under us; recording the status again")
		mem.written = nil
		return false, true, nil
	case apierrors.IsNotFound(err):
		mem.written = nil
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("patch status of FencedLease %s: %w", klog.KObj(fl), err)
	}
	mem.remember(fl)
	return true, false, nil
}

// computeStatus records the Lease in the status, if it is newer than the one
// the status records, and sets the conditions.
func (r *Reconciler) computeStatus(ctx context.Context, s *scope) {
	st := &s.fl.Status
	if s.lease != nil && !unsaved(s.lease) && (st.LeaseResourceVersion == "" || record.MaybeNewer(s.lease.ResourceVersion, st.LeaseResourceVersion)) {
		next := st.DeepCopy()
		mirrorLease(next, s)
		if !onlyRenewed(st, next) || r.pace.recordsRenewal(r.Clock.Now(), timeOf(st.RenewTime), timeOf(next.RenewTime), r.StatusRenewalInterval) {
			*st = *next
		}
	}
	if s.pods != nil {
		st.Candidates = int32(holder.CountEligible(s.pods.candidates))
	}
	r.setDegraded(ctx, s)
	setHeld(s)
	setReady(s)
}

// mirrorLease records a Lease newer than the one the status records. Fence
// and transitions never go back, whatever the Lease says (a Lease re-created
// from an older record).
func mirrorLease(st *fencingv1alpha1.FencedLeaseStatus, s *scope) {
	l, v := s.lease, holder.LeaseOf(s.lease)
	st.LeaseResourceVersion = l.ResourceVersion
	st.Transitions = max(st.Transitions, ptr.Deref(l.Spec.LeaseTransitions, 0))
	st.Fence = max(st.Fence, v.Fence)
	st.Holder, st.AcquireTime, st.RenewTime, st.ExpireTime = nil, nil, nil, nil
	if v.State == holder.StateHeld || v.State == holder.StateRevoked {
		st.RenewTime = l.Spec.RenewTime
		if l.Spec.RenewTime != nil {
			d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
			st.ExpireTime = ptr.To(metav1.NewMicroTime(l.Spec.RenewTime.Add(d)))
		}
	}
	if v.State == holder.StateHeld && v.Fence >= st.Fence {
		st.AcquireTime = l.Spec.AcquireTime
		st.Holder = &fencingv1alpha1.HolderRef{PodName: ptr.Deref(l.Spec.HolderIdentity, ""), PodUID: v.HolderUID}
		if c, ok := holder.Find(candidatesOf(s), v.HolderUID); ok {
			st.Holder.NodeName = c.NodeName
		}
	}
}

// onlyRenewed tells whether next records nothing but a renewal of the grant
// st records: the same holder and fence, a later renew time.
func onlyRenewed(st, next *fencingv1alpha1.FencedLeaseStatus) bool {
	if st.RenewTime == nil || next.RenewTime == nil || !st.RenewTime.Before(next.RenewTime) {
		return false
	}
	// Shallow copies: only their own top-level fields are cleared.
	a, b := *st, *next
	a.LeaseResourceVersion, a.RenewTime, a.ExpireTime = "", nil, nil
	b.LeaseResourceVersion, b.RenewTime, b.ExpireTime = "", nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

func timeOf(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func candidatesOf(s *scope) []holder.Candidate {
	if s.pods == nil {
		return nil
	}
	return s.pods.candidates
}

func (r *Reconciler) setDegraded(ctx context.Context, s *scope) {
	d := s.degraded
	if d == nil && s.pods != nil && len(s.pods.overlaps) > 0 {
		sort.Strings(s.pods.overlaps)
		d = &condition{reason: fencingv1alpha1.ReasonSelectorOverlap, message: fmt.Sprintf(
			"some candidate pods are also selected by FencedLease %s; such pods are never granted", strings.Join(s.pods.overlaps, ", "))}
	}
	if d == nil {
		d = r.unprotected(ctx, s)
	}
	cond := metav1.Condition{Type: fencingv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse,
		Reason: fencingv1alpha1.ReasonAsExpected, Message: "", ObservedGeneration: s.fl.Generation}
	if d != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, d.reason, d.message
		prev := meta.FindStatusCondition(s.fl.Status.Conditions, fencingv1alpha1.ConditionDegraded)
		event := map[string]string{
			fencingv1alpha1.ReasonSelectorOverlap:       fencingv1alpha1.EventSelectorOverlap,
			fencingv1alpha1.ReasonProtectionUnavailable: fencingv1alpha1.EventProtectionUnavailable,
		}[d.reason]
		if event != "" && (prev == nil || prev.Reason != d.reason) {
			r.event(ctx, s.fl, eventWarning, event, "%s", d.message)
		}
	}
	meta.SetStatusCondition(&s.fl.Status.Conditions, cond)
}

func setHeld(s *scope) {
	cond := metav1.Condition{Type: fencingv1alpha1.ConditionHeld, ObservedGeneration: s.fl.Generation}
	h := s.fl.Status.Holder
	switch {
	case s.inputErr != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, fencingv1alpha1.ReasonInternalError, s.inputErr.Error()
	case h != nil:
		cond.Status, cond.Reason = metav1.ConditionTrue, fencingv1alpha1.ReasonGranted
		cond.Message = fmt.Sprintf("pod %s holds the lease with fence %d", h.PodName, s.fl.Status.Fence)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, waitingReason(s), waitingMessage(s)
	}
	meta.SetStatusCondition(&s.fl.Status.Conditions, cond)
}

func waitingReason(s *scope) string {
	if s.degraded != nil {
		return s.degraded.reason
	}
	if s.plan.Waiting != "" {
		return s.plan.Waiting
	}
	return fencingv1alpha1.ReasonGranting
}

func waitingMessage(s *scope) string {
	switch waitingReason(s) {
	case fencingv1alpha1.ReasonNoCandidates:
		return "no candidate pod is Running with ready containers"
	case fencingv1alpha1.ReasonWaitingForExpiry:
		return "the previous grant must expire before a new one (takeover Safe)"
	case fencingv1alpha1.ReasonPaused:
		return "the FencedLease is paused: nothing new is granted"
	case fencingv1alpha1.ReasonGranting:
		return "a grant is being written and committed"
	case fencingv1alpha1.ReasonWaitingForCapacity:
		return "the operator admits no first grant while it keeps a margin for renewing the grants it holds (its log says why); this one waits until it has room (more operator workers, or longer leases, raise the capacity)"
	}
	return s.degraded.message
}

func setReady(s *scope) {
	held := meta.IsStatusConditionTrue(s.fl.Status.Conditions, fencingv1alpha1.ConditionHeld)
	degraded := meta.IsStatusConditionTrue(s.fl.Status.Conditions, fencingv1alpha1.ConditionDegraded)
	cond := metav1.Condition{Type: fencingv1alpha1.ConditionReady, ObservedGeneration: s.fl.Generation,
		Status: metav1.ConditionFalse, Reason: fencingv1alpha1.ReasonNotReady}
	switch {
	case held && !degraded:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, fencingv1alpha1.ReasonReady, "a pod holds the lease"
	case degraded:
		cond.Message = "degraded: " + meta.FindStatusCondition(s.fl.Status.Conditions, fencingv1alpha1.ConditionDegraded).Message
	default:
		cond.Message = "no pod holds the lease: " + meta.FindStatusCondition(s.fl.Status.Conditions, fencingv1alpha1.ConditionHeld).Message
	}
	meta.SetStatusCondition(&s.fl.Status.Conditions, cond)
}
