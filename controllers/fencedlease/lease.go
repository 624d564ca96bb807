package fencedlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// errLeaseLagging says that the Lease cache does not know a Lease that the
// API server has (it was created a moment ago): look again later.
var errLeaseLagging = errors.New("the Lease cache lags behind the API server")

// leaseView is the grant recorded on the Lease, as internal/holder sees it.
func leaseView(l *coordinationv1.Lease) holder.Lease {
	return holder.Lease{
		State:     l.Annotations[annotationState],
		HolderUID: types.UID(l.Annotations[annotationHolderUID]),
		Fence:     fenceAnnotation(l.Annotations),
		Renewal:   l.Annotations[fencingv1alpha1.LeaseAnnotationRenewal],
		Deleting:  l.DeletionTimestamp != nil,
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
// is missing. Before creating, the FencedLease is read from the API server:
// a Lease deleted behind the operator's back is re-created from the newest
// record as a revoked grant whenever a fence was ever recorded, so that
// takeover Safe still waits a full lease duration, the last fence stays the
// floor of the next one, and leaseTransitions never goes back; a Lease this
// process let go once its grant was over is re-created with no grant in
// force.
func (r *Reconciler) getOrCreateLease(ctx context.Context, fl *fencingv1alpha1.FencedLease) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, key, l)
	switch {
	case err == nil:
		return r.adoptLease(ctx, fl, l)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get Lease %s: %w", key, err)
	}
	live := &fencingv1alpha1.FencedLease{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		return nil, fmt.Errorf("read FencedLease %s before re-creating its Lease: %w", key, err)
	}
	if live.UID != fl.UID || live.DeletionTimestamp != nil {
		return nil, errLeaseLagging // the cache lags behind a deletion
	}
	l = revokedLease(live, r.observations.maxFence(key), r.observations.over(key))
	if err := controllerutil.SetControllerReference(fl, l, r.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner of Lease %s: %w", klog.KObj(l), err)
	}
	err = r.Create(ctx, l)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, errLeaseLagging
	case err != nil:
		return nil, fmt.Errorf("create Lease %s: %w", klog.KObj(l), err)
	}
	return l, nil
}

// revokedLease is the Lease of a FencedLease whose Lease is missing: free
// when it never recorded a fence, otherwise a revoked grant carrying the last
// fence and transition count (taking the operator's own memory into account).
// over says that this process let the Lease go itself once its grant was
// over (decideDeleting): the fence and count are kept, with no grant in
// force. It carries the operator's finalizer.
func revokedLease(fl *fencingv1alpha1.FencedLease, remembered int64, over *coordinationv1.Lease) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: fl.Namespace, Name: fl.Name, Annotations: map[string]string{},
		Finalizers: []string{fencingv1alpha1.LeaseFinalizer}}}
	fence := holder.MaxFence(fl.Status.Fence, remembered)
	transitions := fl.Status.Transitions
	if over != nil {
		fence = holder.MaxFence(fence, fenceAnnotation(over.Annotations))
		transitions = max(transitions, ptr.Deref(over.Spec.LeaseTransitions, 0))
	}
	if fence == 0 && transitions == 0 {
		return l
	}
	if fence > 0 {
		l.Annotations[annotationFence] = strconv.FormatInt(fence, 10)
	}
	l.Spec.LeaseTransitions = ptr.To(transitions)
	if over != nil {
		return l
	}
	l.Annotations[annotationState] = holder.StateRevoked
	if h := fl.Status.Holder; h != nil {
		l.Spec.HolderIdentity = ptr.To(h.PodName)
		l.Annotations[annotationHolderUID] = string(h.PodUID)
	}
	return l
}

// adoptLease checks that the Lease is controlled by this FencedLease. A Lease
// left by an earlier FencedLease of the same name is adopted (it carries the
// fence floor); any other owner is a conflict.
func (r *Reconciler) adoptLease(ctx context.Context, fl *fencingv1alpha1.FencedLease, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if ref := metav1.GetControllerOf(l); ref != nil && ref.UID == fl.UID {
		return l, nil
	}
	if !controlledByFencedLease(l, fl.Name) {
		return nil, errLeaseNotOwned{lease: l}
	}
	adopted := l.DeepCopy()
	adopted.OwnerReferences = nil
	keepRecord(adopted)
	if err := controllerutil.SetControllerReference(fl, adopted, r.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner of Lease %s: %w", klog.KObj(l), err)
	}
	if err := r.Update(ctx, adopted); err != nil {
		return nil, fmt.Errorf("adopt Lease %s: %w", klog.KObj(l), err)
	}
	return adopted, nil
}

// controlledByFencedLease says whether a FencedLease named name, this one
// or an earlier one of the same name, controls the Lease.
func controlledByFencedLease(l *coordinationv1.Lease, name string) bool {
	ref := metav1.GetControllerOf(l)
	return ref != nil && ref.Kind == "FencedLease" && ref.Name == name &&
		ref.APIVersion == fencingv1alpha1.GroupVersion.String()
}

// updateLease writes the Lease as a compare-and-swap: the resourceVersion it
// was read with is the precondition, so two writers that read the same Lease
// never both succeed.
func (r *Reconciler) updateLease(ctx context.Context, l *coordinationv1.Lease, what string, mutate func(*coordinationv1.Lease)) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	mutate(next)
	keepRecord(next)
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("%s on Lease %s: %w", what, klog.KObj(l), err)
	}
	return next, nil
}

// keepRecord gives a Lease the operator's finalizer (a Lease written before
// there was one gets it with its next write), unless it is being deleted:
// the API server adds no finalizer then.
func keepRecord(l *coordinationv1.Lease) {
	if l.DeletionTimestamp == nil {
		controllerutil.AddFinalizer(l, fencingv1alpha1.LeaseFinalizer)
	}
}

// dropLease lets a deleted Lease go once its grant is over: it removes the
// operator's finalizer, as a compare-and-swap on the version that was
// decided on. The Lease is then gone; the next reconcile re-creates it.
func (r *Reconciler) dropLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	controllerutil.RemoveFinalizer(next, fencingv1alpha1.LeaseFinalizer)
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("let go of deleted Lease %s: %w", klog.KObj(l), err)
	}
	return next, nil
}

// writeGrant is the grant: one compare-and-swap write of the Lease that
// names the new holder, the renewal mode and the renew interval (for a
// holder that renews). Its resulting resourceVersion is the fence. The grant
// stays pending until commitGrant records that fence.
func (r *Reconciler) writeGrant(ctx context.Context, l *coordinationv1.Lease, target holder.Candidate, p holder.Policy, marks map[string]string) (*coordinationv1.Lease, error) {
	return r.updateLease(ctx, l, "grant to pod "+target.Name, func(next *coordinationv1.Lease) {
		for k, v := range marks {
			next.Annotations[k] = v
		}
		now := metav1.NewMicroTime(r.Clock.Now())
		next.Spec.HolderIdentity = ptr.To(target.Name)
		next.Spec.AcquireTime = &now
		next.Spec.RenewTime = &now
		next.Spec.LeaseDurationSeconds = ptr.To(int32(p.LeaseDuration / time.Second))
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		next.Annotations[annotationHolderUID] = string(target.UID)
		next.Annotations[annotationState] = holder.StatePending
		next.Annotations[fencingv1alpha1.LeaseAnnotationRenewal] = p.Renewal
		next.Annotations[fencingv1alpha1.LeaseAnnotationRenewInterval] = strconv.Itoa(int(p.RenewInterval / time.Second))
	})
}

// commitGrant records the fence of a pending grant on the Lease, again as a
// compare-and-swap on the grant's own resourceVersion: it succeeds only if
// nothing else wrote the Lease since the grant.
func (r *Reconciler) commitGrant(ctx context.Context, l *coordinationv1.Lease, fence int64) (*coordinationv1.Lease, error) {
	return r.updateLease(ctx, l, fmt.Sprintf("commit fence %d", fence), func(next *coordinationv1.Lease) {
		next.Annotations[annotationFence] = strconv.FormatInt(fence, 10)
		next.Annotations[annotationState] = holder.StateHeld
	})
}

// renewLease extends the current grant; a conflict means someone else wrote
// the Lease, and the next reconcile looks again rather than overwrite it.
func (r *Reconciler) renewLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return r.updateLease(ctx, l, "renew", func(next *coordinationv1.Lease) {
		now := metav1.NewMicroTime(r.Clock.Now())
		next.Spec.RenewTime = &now
	})
}

// revokeLease marks the grant as no longer renewed. It keeps the holder and
// the renew time, which say when the grant ends. marks are more annotations
// to set in the same write.
func (r *Reconciler) revokeLease(ctx context.Context, l *coordinationv1.Lease, marks map[string]string) (*coordinationv1.Lease, error) {
	return r.updateLease(ctx, l, "revoke the grant", func(next *coordinationv1.Lease) {
		for k, v := range marks {
			next.Annotations[k] = v
		}
		next.Annotations[annotationState] = holder.StateRevoked
	})
}

// deleteLease deletes the Lease of a FencedLease being deleted, if it
// controls it.
func (r *Reconciler) deleteLease(ctx context.Context, fl *fencingv1alpha1.FencedLease) error {
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}, l)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get Lease %s/%s: %w", fl.Namespace, fl.Name, err)
	case !metav1.IsControlledBy(l, fl):
		return nil
	}
	if err := r.releaseLease(ctx, l); err != nil {
		return err
	}
	if l.DeletionTimestamp != nil {
		return nil
	}
	if err := client.IgnoreNotFound(r.Delete(ctx, l, client.Preconditions{UID: &l.UID})); err != nil {
		return fmt.Errorf("delete Lease %s: %w", klog.KObj(l), err)
	}
	return nil
}

// releaseLease removes the operator's finalizer from a Lease whose
// FencedLease is being deleted or is gone: nothing can confirm its grant any
// more. A merge patch of the finalizers alone, without a resourceVersion, so
// that a renewal does not make it conflict; but with the Lease's UID, which
// the API server refuses to change: a Lease created since under the same
// name, for a FencedLease of the same name created again, is another
// object, and a replica whose cache still shows the old one must not take
// the new one's finalizer.
func (r *Reconciler) releaseLease(ctx context.Context, l *coordinationv1.Lease) error {
	if !controllerutil.ContainsFinalizer(l, fencingv1alpha1.LeaseFinalizer) {
		return nil
	}
	return r.removeFinalizer(ctx, "Lease", l, fencingv1alpha1.LeaseFinalizer)
}

// removeFinalizer takes one of the operator's finalizers off obj, on the
// object of obj's UID only (finalizersPatch). An object that is gone, or
// that the name no longer stands for, has nothing left to let go.
func (r *Reconciler) removeFinalizer(ctx context.Context, kind string, obj client.Object, finalizer string) error {
	controllerutil.RemoveFinalizer(obj, finalizer)
	err := r.Patch(ctx, obj, finalizersPatch(obj))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case otherUID(err):
		ctrl.LoggerFrom(ctx).V(4).Info("The "+kind+" is another one now; leaving its finalizer alone", "object", klog.KObj(obj), "err", err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("remove finalizer from %s %s: %w", kind, klog.KObj(obj), err)
	}
	return nil
}

// finalizersPatch is a JSON merge patch that sets an object's finalizers to
// what obj carries, on the object of obj's UID only: the API server refuses
// a patch that would change a UID.
func finalizersPatch(obj client.Object) client.Patch {
	finalizers := obj.GetFinalizers()
	if finalizers == nil {
		finalizers = []string{}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": obj.GetUID(), "finalizers": finalizers}})
	if err != nil {
		panic(err) // strings always marshal
	}
	return client.RawPatch(types.MergePatchType, data)
}

// otherUID tells whether a write failed because it named the UID of an
// object that the name no longer stands for (metadata.uid is immutable).
func otherUID(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// releaseOrphan lets go of a deleted Lease whose FencedLease is gone (its
// finalizer removed by hand, so the operator never saw it deleting): the
// garbage collector deleted the Lease, and only the operator's finalizer
// keeps it. The FencedLease is confirmed gone on the API server first: a
// lagging cache must not let go of a record still in use.
func (r *Reconciler) releaseOrphan(ctx context.Context, key types.NamespacedName) error {
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, key, l); err != nil {
		return client.IgnoreNotFound(err)
	}
	if l.DeletionTimestamp == nil || !controlledByFencedLease(l, key.Name) ||
		!controllerutil.ContainsFinalizer(l, fencingv1alpha1.LeaseFinalizer) {
		return nil
	}
	err := r.APIReader.Get(ctx, key, &fencingv1alpha1.FencedLease{})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("read FencedLease %s before letting go of its Lease: %w", key, err)
	}
	return r.releaseLease(ctx, l)
}
