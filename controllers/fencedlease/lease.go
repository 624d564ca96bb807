package fencedlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
	"github.com/fencedlease/fencedlease/internal/apistatus"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
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

// fenceAnnotation reads a fence written by the operator; anything that does
// not parse counts as no fence.
func fenceAnnotation(ann map[string]string) int64 { return record.FenceOf(ann[record.AnnotationFence]) }

// getOrCreateLease returns the Lease of the FencedLease, creating it when it
// is missing. A Lease that would carry no record at all (no fence ever, no
// transition) is returned unsaved, without a resourceVersion: the grant
// creates it already granted (writeLease), one write fewer for every first
// grant, and a reconcile that grants nothing creates it as it is
// (saveLease). Before creating, the FencedLease is read from the API server:
// a Lease deleted behind the operator's back is re-created from the newest
// record as a revoked grant whenever a fence was ever recorded, so that
// takeover Safe still waits a full lease duration, the last fence stays the
// floor of the next one, and leaseTransitions never goes back; a Lease this
// process let go once its grant was over is re-created with no grant in
// force.
func (r *Reconciler) getOrCreateLease(ctx context.Context, fl *fencingv1alpha1.FencedLease, mem *memory) (*coordinationv1.Lease, error) {
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
	l = revokedLease(live, mem.maxFence, mem.over())
	if err := controllerutil.SetControllerReference(fl, l, r.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner of Lease %s: %w", klog.KObj(l), err)
	}
	if len(l.Annotations) == 0 && l.Spec.LeaseTransitions == nil {
		return l, nil
	}
	if err := r.saveLease(ctx, l); err != nil {
		return nil, err
	}
	return l, nil
}

// unsaved tells whether the Lease was never created (getOrCreateLease).
func unsaved(l *coordinationv1.Lease) bool { return l != nil && l.ResourceVersion == "" }

// saveLease creates a Lease that getOrCreateLease left unsaved. One that
// exists already was created by another replica (or the cache lags behind
// it): the reconcile looks again.
func (r *Reconciler) saveLease(ctx context.Context, l *coordinationv1.Lease) error {
	err := r.Create(ctx, l)
	switch {
	case apierrors.IsAlreadyExists(err):
		return errLeaseLagging
	case err != nil:
		return fmt.Errorf("create Lease %s: %w", klog.KObj(l), err)
	}
	return nil
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
	r := record.Lease{Fence: fence}
	l.Spec.LeaseTransitions = ptr.To(transitions)
	if over == nil {
		r.State = holder.StateRevoked
		if h := fl.Status.Holder; h != nil {
			l.Spec.HolderIdentity = ptr.To(h.PodName)
			r.HolderUID = string(h.PodUID)
		}
	}
	r.Apply(l.Annotations)
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
	holder.KeepRecord(adopted)
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

// writeLease writes the next version of the Lease that a write of
// internal/holder made, as a compare-and-swap: the resourceVersion it was
// read with is the precondition, so two writers that read the same Lease
// never both succeed.
func (r *Reconciler) writeLease(ctx context.Context, next *coordinationv1.Lease, what string) (*coordinationv1.Lease, error) {
	if unsaved(next) {
		// The Lease is created with the write: a Lease created since by
		// another replica makes it fail as a conflict would.
		err := r.Create(ctx, next)
		if apierrors.IsAlreadyExists(err) {
			err = apierrors.NewConflict(coordinationv1.Resource("leases"), next.Name, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s on Lease %s, created with it: %w", what, klog.KObj(next), err)
		}
		return next, nil
	}
	if err := r.Update(ctx, next); err != nil {
		return nil, fmt.Errorf("%s on Lease %s: %w", what, klog.KObj(next), err)
	}
	return next, nil
}

// dropLease lets a deleted Lease go once its grant is over (DropWrite). The
// Lease is then gone; the next reconcile re-creates it.
func (r *Reconciler) dropLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return r.writeLease(ctx, holder.DropWrite(l), "let go of the deleted grant")
}

// writeGrant is the grant (GrantWrite); its resulting resourceVersion is
// the fence. The grant stays pending until commitGrant records that fence.
func (r *Reconciler) writeGrant(ctx context.Context, l *coordinationv1.Lease, target holder.Candidate, p holder.Policy, handoff string) (*coordinationv1.Lease, error) {
	return r.writeLease(ctx, holder.GrantWrite(l, target, p, r.Clock.Now(), handoff), "grant to pod "+target.Name)
}

// commitGrant records the fence of a pending grant (CommitWrite).
func (r *Reconciler) commitGrant(ctx context.Context, l *coordinationv1.Lease, fence int64, p holder.Policy) (*coordinationv1.Lease, error) {
	return r.writeLease(ctx, holder.CommitWrite(l, fence, p, r.Clock.Now()), fmt.Sprintf("commit fence %d", fence))
}

// renewLease extends the current grant (RenewWrite); a conflict means
// someone else wrote the Lease, and the next reconcile looks again rather
// than overwrite it.
func (r *Reconciler) renewLease(ctx context.Context, l *coordinationv1.Lease, p holder.Policy) (*coordinationv1.Lease, error) {
	return r.writeLease(ctx, holder.RenewWrite(l, p, r.Clock.Now()), "renew")
}

// revokeLease marks the grant as no longer renewed (RevokeWrite).
func (r *Reconciler) revokeLease(ctx context.Context, l *coordinationv1.Lease, handoff string) (*coordinationv1.Lease, error) {
	return r.writeLease(ctx, holder.RevokeWrite(l, handoff), "revoke the grant")
}

// releaseLease removes the operator's finalizer from a Lease whose
// FencedLease is gone: nothing can confirm its grant any more. A merge patch of the finalizers alone, without a resourceVersion, so
// that a renewal does not make it conflict; but with the Lease's UID, which
// the API server refuses to change: a Lease created since under the same
// name, for a FencedLease of the same name created again, is another
// object, and a replica whose cache still shows the old one must not take
// the new one's finalizer.
func (r *Reconciler) releaseLease(ctx context.Context, l *coordinationv1.Lease) error {
	if !holder.HasRecord(l) {
		return nil
	}
	l.Finalizers = holder.WithoutRecord(l)
	return r.removeFinalizers(ctx, "Lease", l)
}

// removeFinalizer takes one of the operator's finalizers off obj, on the
// object of obj's UID only (finalizersPatch). An object that is gone, or
// that the name no longer stands for, has nothing left to let go.
func (r *Reconciler) removeFinalizer(ctx context.Context, kind string, obj client.Object, finalizer string) error {
	controllerutil.RemoveFinalizer(obj, finalizer)
	return r.removeFinalizers(ctx, kind, obj)
}

// removeFinalizers writes obj's finalizers as obj carries them (without
// the operator's), on the object of obj's UID only (finalizersPatch).
func (r *Reconciler) removeFinalizers(ctx context.Context, kind string, obj client.Object) error {
	err := r.Patch(ctx, obj, finalizersPatch(obj))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apistatus.OtherUID(err):
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

// releaseOrphan lets go of a deleted Lease whose FencedLease is gone (its
// finalizer removed by hand, so the operator never saw it deleting): the
// garbage collector deleted the Lease, and only the operator's finalizer
// keeps it. The FencedLease is confirmed gone on the API server first: a
// lagging cache must not let go of a record still in use. released says
// whether it let one go.
func (r *Reconciler) releaseOrphan(ctx context.Context, key types.NamespacedName) (released bool, err error) {
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, key, l); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if l.DeletionTimestamp == nil || !controlledByFencedLease(l, key.Name) ||
		!holder.HasRecord(l) {
		return false, nil
	}
	err = r.APIReader.Get(ctx, key, &fencingv1alpha1.FencedLease{})
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("read FencedLease %s before letting go of its Lease: %w", key, err)
	}
	return true, r.releaseLease(ctx, l)
}
