package fencedlease

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// reconcileDelete releases everything a FencedLease being deleted holds. Its
// grant ends as any grant does, not at once: the Lease is deleted, and kept
// by its finalizer until the grant is over (revoked at once; with takeover
// Safe, until it expired on the operator's clock or its holder is reported
// terminated), exactly as a Lease deleted by anyone else (decideDeleting).
// A holder that renews its own grant sees the revocation and stops, and
// until then no FencedLease of the same name can be created, so none can
// grant another pod while the old holder may still act on its grant. Only
// then do the pods lose the label and annotations (which also makes a
// publication still in flight fail its optimistic lock), and the finalizer
// goes. The Lease is deleted here rather than left to the garbage collector
// so that deletion is complete when the FencedLease is gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, fl *fencingv1alpha1.FencedLease, mem *memory) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(fl, fencingv1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(fl)
	l, err := r.ownLease(ctx, fl)
	if err != nil {
		return ctrl.Result{}, err
	}
	if l != nil {
		return r.endGrantOfDeleted(ctx, fl, l, mem)
	}
	if err := r.clearPods(ctx, true, fl.Namespace, fl.Name, fl.UID); err != nil {
		return ctrl.Result{}, err
	}
	r.forget(key)
	// On this FencedLease only: a replica whose cache lags could be deleting
	// one that is gone, and the name may stand for a new one now.
	return ctrl.Result{}, r.removeFinalizer(ctx, "FencedLease", fl, fencingv1alpha1.Finalizer)
}

// ownLease returns the Lease of a FencedLease being deleted, if it controls
// one. A Lease the cache does not show is looked up on the API server before
// the deletion goes on without it: the cache may not have seen one that
// another replica created a moment ago.
func (r *Reconciler) ownLease(ctx context.Context, fl *fencingv1alpha1.FencedLease) (*coordinationv1.Lease, error) {
	key := client.ObjectKeyFromObject(fl)
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, l)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get Lease %s: %w", key, err)
	case !metav1.IsControlledBy(l, fl):
		return nil, nil
	}
	return l, nil
}

// endGrantOfDeleted deletes the Lease of a FencedLease being deleted and
// ends its grant as for any deleted Lease: the grant step revokes it, waits,
// and lets the Lease go (Drop). It looks again until the Lease is gone.
func (r *Reconciler) endGrantOfDeleted(ctx context.Context, fl *fencingv1alpha1.FencedLease, l *coordinationv1.Lease, mem *memory) (ctrl.Result, error) {
	if l.DeletionTimestamp == nil {
		err := r.Delete(ctx, l, client.Preconditions{UID: &l.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("delete Lease %s: %w", klog.KObj(l), err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the Lease of a FencedLease being deleted; it stays until its grant is over", "lease", klog.KObj(l))
		return ctrl.Result{RequeueAfter: r.mem.retryAfter(client.ObjectKeyFromObject(fl))}, nil
	}
	if !holder.HasRecord(l) {
		// Written before the Lease had a finalizer: it goes at once.
		return ctrl.Result{RequeueAfter: r.mem.retryAfter(client.ObjectKeyFromObject(fl))}, nil
	}
	p, err := r.gatherPods(ctx, fl, mem)
	if err != nil {
		// An invalid selector leaves no candidate to ask about: the grant
		// simply waits to expire.
		var invalid invalidSelectorError
		if !errors.As(err, &invalid) {
			return ctrl.Result{}, err
		}
		p = &pods{}
	}
	s := &scope{key: client.ObjectKeyFromObject(fl), fl: fl, recorded: *fl.Status.DeepCopy(), lease: l, pods: p, mem: mem}
	res, err := r.reconcileGrant(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.next != goOn {
		return ctrl.Result{RequeueAfter: r.mem.retryAfter(s.key)}, nil
	}
	r.mem.settled(s.key)
	return res, nil
}

// clearPods removes the label and annotations of a FencedLease from the pods
// that carry them, each on the version read: a pod that another FencedLease
// has taken since is left alone. uid is the FencedLease being deleted, or
// empty when it is gone.
//
// Once a grant is over (a FencedLease being deleted, an orphaned Lease let
// go), live lists the pods from the API server, not the cache: every pod
// that carries the label then must be cleared, since a FencedLease created
// again under the name publishes its first grant without a list of its own
// (publishFirst). A cache that had not yet seen the label on the last
// holder would leave it published, or leave a publication of the last
// grant still in flight free to land.
//
// A FencedLease may be deleted and created again under the same name, and a
// replica whose cache saw only the deletion would clear the pods of the new
// one, its holder included. So once the pods are listed, the API server is
// asked which FencedLease of that name exists now: if it is another one, its
// pods are left to it. A publication of the new one after the list changes
// its pod, and the clear on the version listed then fails.
func (r *Reconciler) clearPods(ctx context.Context, live bool, namespace, name string, uid types.UID) error {
	var marked corev1.PodList
	var err error
	if live {
		err = r.APIReader.List(ctx, &marked, client.InNamespace(namespace), client.MatchingLabels{fencingv1alpha1.LabelLease: name})
	} else {
		err = r.List(ctx, &marked, client.InNamespace(namespace), client.MatchingFields{indexPodLabels: fencingv1alpha1.LabelLease + "=" + name})
	}
	if err != nil {
		return fmt.Errorf("list pods of FencedLease %s: %w", klog.KRef(namespace, name), err)
	}
	if len(marked.Items) == 0 {
		return nil
	}
	now := &fencingv1alpha1.FencedLease{}
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, now)
	switch {
	case err == nil && now.UID != uid:
		ctrl.LoggerFrom(ctx).V(4).Info("A FencedLease of the same name exists again; leaving its pods to it", "uid", now.UID)
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("read FencedLease %s before clearing its pods: %w", klog.KRef(namespace, name), err)
	}
	fl := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	for i := range marked.Items {
		pod := &marked.Items[i]
		if err := r.writePod(ctx, fl, pod, holder.Clear, 0, pod.ResourceVersion); err != nil {
			return err
		}
		if err := r.syncHolderCondition(ctx, pod, false); err != nil {
			return err
		}
	}
	return nil
}
