package fencedshardset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// recordStatus records, once per reconcile, what the set's shards are: how
// many are owned by an eligible pod and how many are on their way to one,
// and the conditions. It runs after a failed step too, with what the step
// left.
//
// A reconcile that could not read the pods or the Leases keeps the counts
// (and the metrics) of the last one that did: a failed read says nothing
// of who owns what, and Degraded tells of the failure.
func (r *Reconciler) recordStatus(ctx context.Context, s *scope, failed error) error {
	st := &s.set.Status
	if read := s.leases != nil || s.invalid != ""; read {
		st.Shards, st.Pods = int32(len(s.keys)), int32(len(s.eligible))
		st.Owned, st.Moving = 0, 0
		var unowned []string
		for _, key := range s.keys {
			l := s.leases[key]
			if l != nil && owned(s, record.ParseLease(l.Annotations), ptr.Deref(l.Spec.HolderIdentity, "")) {
				st.Owned++
				continue
			}
			unowned = append(unowned, key)
			if l != nil && s.plan.Owners[key] != "" {
				st.Moving++
			}
		}
		r.recordMetrics(s, unowned)
	}
	st.Moves += int64(s.moved)
	st.ObservedGeneration = s.set.Generation
	r.setConditions(s, failed)
	if err := r.Status().Patch(ctx, s.set, client.MergeFrom(s.base)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("record the status of FencedShardSet %s: %w", client.ObjectKeyFromObject(s.set), err)
	}
	return nil
}

// owned says whether a shard's grant is committed to an eligible pod.
func owned(s *scope, rec record.Lease, holder string) bool {
	c, ok := s.eligible[holder]
	return ok && rec.Holds(string(c.UID))
}

// setConditions sets Ready (every shard owned) and Degraded (what the
// operator cannot mend alone: an invalid spec, Leases of the shards' names
// that the set does not control, a step that failed).
func (r *Reconciler) setConditions(s *scope, failed error) {
	st := &s.set.Status
	ready := metav1.Condition{Type: fencingv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: fencingv1alpha1.ReasonShardsOwned,
		Message: fmt.Sprintf("%d of %d shards owned by %d pods", st.Owned, st.Shards, st.Pods)}
	if st.Owned < st.Shards {
		ready.Status, ready.Reason = metav1.ConditionFalse, fencingv1alpha1.ReasonShardsUnowned
		if st.Pods == 0 {
			ready.Reason, ready.Message = fencingv1alpha1.ReasonNoCandidates, fmt.Sprintf("no eligible candidate pod for %d shards", st.Shards)
		}
	}
	degraded := metav1.Condition{Type: fencingv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: fencingv1alpha1.ReasonAsExpected, Message: "nothing is wrong"}
	switch {
	case s.invalid != "":
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, s.invalidReason, s.invalid
	case len(s.conflicts) > 0:
		names := slices.Sorted(maps.Values(s.conflicts))
		degraded.Status, degraded.Reason = metav1.ConditionTrue, fencingv1alpha1.ReasonLeaseConflict
		degraded.Message = fmt.Sprintf("Leases not controlled by this FencedShardSet have its shards' names; their shards are never granted: %s", strings.Join(names, ", "))
	case failed != nil && !onlyConflicts(failed):
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, fencingv1alpha1.ReasonInternalError, failed.Error()
	}
	for _, c := range []metav1.Condition{ready, degraded} {
		c.ObservedGeneration = s.set.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
}

// onlyConflicts says whether every error is a failed precondition: another
// writer was first, which the next reconcile reads; nothing is degraded.
func onlyConflicts(err error) bool {
	var agg kerrors.Aggregate
	if !errors.As(err, &agg) {
		return apierrors.IsConflict(err)
	}
	for _, e := range agg.Errors() {
		if !apierrors.IsConflict(e) {
			return false
		}
	}
	return true
}
