package fencedlease

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// handoffRequest returns the pending handoff request of a FencedLease: the
// value of its fencedlease.io/handoff-requested-at annotation, when neither
// the status nor the Lease records it as handled. The Lease records the
// request on the write that starts the handoff, in the same
// compare-and-swap: a reconcile whose status patch is lost does not hand
// over twice.
func handoffRequest(s *scope) (string, bool) {
	v := s.fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt]
	if v == "" || v == s.fl.Status.LastHandledHandoffAt {
		return v, false
	}
	if record.ParseLease(s.lease.Annotations).Handoff == v {
		s.fl.Status.LastHandledHandoffAt = v
		return v, false
	}
	return v, true
}

// handoffMark is the handoff request that the Lease write of a handoff
// carries out, "" for any other write.
func handoffMark(s *scope) string {
	if s.plan.Handoff != holder.HandoffStarted {
		return ""
	}
	return s.fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt]
}

// handledHandoff records a handoff request that the plan handled: started
// (the revoke or grant reported it), not needed, or refused.
func (r *Reconciler) handledHandoff(ctx context.Context, s *scope, request string) {
	switch s.plan.Handoff {
	case "":
		return
	case holder.HandoffRefused:
		r.event(ctx, s.fl, eventWarning, fencingv1alpha1.EventHandoffRefused,
			"Handoff requested at %s not done: %s; the holder keeps its grant", request, s.plan.HandoffNote)
	case holder.HandoffNotNeeded:
		ctrl.LoggerFrom(ctx).Info("Handoff request handled: the grant ends anyway", "request", request, "why", s.plan.Why)
	}
	s.fl.Status.LastHandledHandoffAt = request
}
