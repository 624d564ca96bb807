package fencedlease

import (
	"context"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

const (
	annotationHolderUID = fencingv1alpha1.LeaseAnnotationHolderUID
	annotationState     = fencingv1alpha1.LeaseAnnotationState
	annotationFence     = fencingv1alpha1.AnnotationFence
)

// errLeaseNotOwned says the Lease of the FencedLease's name belongs to
// something else; the operator leaves it alone.
type errLeaseNotOwned struct{ lease *coordinationv1.Lease }

func (e errLeaseNotOwned) Error() string {
	return fmt.Sprintf("Lease %s exists and is not controlled by this FencedLease; delete or rename it", klog.KObj(e.lease))
}

// leaseView is the grant recorded on the Lease, as internal/holder sees it.
func leaseView(l *coordinationv1.Lease) holder.Lease {
	return holder.Lease{
		State:     l.Annotations[annotationState],
		HolderUID: types.UID(l.Annotations[annotationHolderUID]),
		Fence:     fenceAnnotation(l.Annotations),
	}
}

// fenceAnnotation reads a fence written by the operator; anything that does
// not parse counts as no fence.
func fenceAnnotation(ann map[string]string) int64 {
	n, err := strconv.ParseInt(ann[annotationFence], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// getOrCreateLease returns the Lease of the FencedLease, creating it when it
// is missing. A Lease re-created while the status still names a holder starts
// as a revoked grant of that holder, so that takeover Safe still waits a full
// lease duration and the last fence is kept as the floor of the next one.
func (r *Reconciler) getOrCreateLease(ctx context.Context, fl *fencingv1alpha1.FencedLease) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}, l)
	switch {
	case err == nil:
		return r.adoptLease(ctx, fl, l)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get Lease %s/%s: %w", fl.Namespace, fl.Name, err)
	}
	l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: fl.Namespace, Name: fl.Name, Annotations: map[string]string{}}}
	if fl.Status.Fence > 0 {
		l.Annotations[annotationFence] = strconv.FormatInt(fl.Status.Fence, 10)
	}
	if h := fl.Status.Holder; h != nil {
		l.Spec.HolderIdentity = ptr.To(h.PodName)
		l.Annotations[annotationHolderUID] = string(h.PodUID)
		l.Annotations[annotationState] = holder.StateRevoked
		l.Spec.LeaseTransitions = ptr.To(fl.Status.Transitions)
	}
	if err := controllerutil.SetControllerReference(fl, l, r.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner of Lease %s: %w", klog.KObj(l), err)
	}
	if err := r.Create(ctx, l); err != nil {
		return nil, fmt.Errorf("create Lease %s: %w", klog.KObj(l), err)
	}
	return l, nil
}

// adoptLease checks that the Lease is controlled by this FencedLease. A Lease
// left by an earlier FencedLease of the same name is adopted (it carries the
// fence floor); any other owner is a conflict.
func (r *Reconciler) adoptLease(ctx context.Context, fl *fencingv1alpha1.FencedLease, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ref := metav1.GetControllerOf(l)
	if ref != nil && ref.UID == fl.UID {
		return l, nil
	}
	if ref == nil || ref.Kind != "FencedLease" || ref.Name != fl.Name ||
		ref.APIVersion != fencingv1alpha1.GroupVersion.String() {
		return nil, errLeaseNotOwned{lease: l}
	}
	adopted := l.DeepCopy()
	adopted.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(fl, adopted, r.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner of Lease %s: %w", klog.KObj(l), err)
	}
	if err := r.Update(ctx, adopted); err != nil {
		return nil, fmt.Errorf("adopt Lease %s: %w", klog.KObj(l), err)
	}
	return adopted, nil
}

// writeGrant is the grant: one compare-and-swap write of the Lease (the
// resourceVersion read is the precondition) that names the new holder. Its
// resulting resourceVersion is the fence. The grant stays pending until
// commitGrant records that fence.
func (r *Reconciler) writeGrant(ctx context.Context, l *coordinationv1.Lease, target holder.Candidate, durationSeconds int32) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	now := metav1.NewMicroTime(r.Clock.Now())
	next.Spec.HolderIdentity = ptr.To(target.Name)
	next.Spec.AcquireTime = &now
	next.Spec.RenewTime = &now
	next.Spec.LeaseDurationSeconds = ptr.To(durationSeconds)
	next.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	next.Annotations[annotationHolderUID] = string(target.UID)
	next.Annotations[annotationState] = holder.StatePending
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("grant Lease %s to pod %s: %w", klog.KObj(l), target.Name, err)
	}
	return next, nil
}

// commitGrant records the fence of a pending grant on the Lease, again as a
// compare-and-swap on the grant's own resourceVersion: it succeeds only if
// nothing else wrote the Lease since the grant.
func (r *Reconciler) commitGrant(ctx context.Context, l *coordinationv1.Lease, fence int64) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	next.Annotations[annotationFence] = strconv.FormatInt(fence, 10)
	next.Annotations[annotationState] = holder.StateHeld
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("commit fence %d on Lease %s: %w", fence, klog.KObj(l), err)
	}
	return next, nil
}

// renewLease extends the current grant; a conflict means someone else wrote
// the Lease, and the next reconcile looks again rather than overwrite it.
func (r *Reconciler) renewLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	now := metav1.NewMicroTime(r.Clock.Now())
	next.Spec.RenewTime = &now
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("renew Lease %s: %w", klog.KObj(l), err)
	}
	return next, nil
}

// revokeLease marks the grant as no longer renewed. It keeps the holder and
// the renew time, which say when the grant ends.
func (r *Reconciler) revokeLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	next.Annotations[annotationState] = holder.StateRevoked
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("revoke grant on Lease %s: %w", klog.KObj(l), err)
	}
	return next, nil
}
