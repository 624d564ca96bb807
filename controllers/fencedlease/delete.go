package fencedlease

import (
	"context"
	"fmt"

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

// reconcileDelete releases everything a FencedLease being deleted holds:
// first the Lease is deleted, so that no replica can confirm the grant any
// more and publish it again; then the pods lose the label and annotations
// (and the holder condition), which also makes a publication still in flight
// fail its optimistic lock; then the finalizer goes. The Lease is deleted here
// rather than left to the garbage collector so that deletion is complete when
// the FencedLease is gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, fl *fencingv1alpha1.FencedLease) error {
	if !controllerutil.ContainsFinalizer(fl, fencingv1alpha1.Finalizer) {
		return nil
	}
	if err := r.deleteLease(ctx, fl); err != nil {
		return err
	}
	if err := r.clearPods(ctx, fl.Namespace, fl.Name, fl.UID); err != nil {
		return err
	}
	r.observations.forget(client.ObjectKeyFromObject(fl))
	r.forgetMetrics(client.ObjectKeyFromObject(fl))
	r.expiries.forget(client.ObjectKeyFromObject(fl))
	r.written.forget(client.ObjectKeyFromObject(fl))
	// On this FencedLease only: a replica whose cache lags could be deleting
	// one that is gone, and the name may stand for a new one now.
	return r.removeFinalizer(ctx, "FencedLease", fl, fencingv1alpha1.Finalizer)
}

// clearPods removes the label and annotations of a FencedLease from the pods
// that carry them, each on the version read: a pod that another FencedLease
// has taken since is left alone. uid is the FencedLease being deleted, or
// empty when it is gone.
//
// A FencedLease may be deleted and created again under the same name, and a
// replica whose cache saw only the deletion would clear the pods of the new
// one, its holder included. So once the pods are listed, the API server is
// asked which FencedLease of that name exists now: if it is another one, its
// pods are left to it. A publication of the new one after the list changes
// its pod, and the clear on the version listed then fails.
func (r *Reconciler) clearPods(ctx context.Context, namespace, name string, uid types.UID) error {
	var marked corev1.PodList
	if err := r.List(ctx, &marked, client.InNamespace(namespace), client.MatchingFields{indexPodLabels: fencingv1alpha1.LabelLease + "=" + name}); err != nil {
		return fmt.Errorf("list pods of FencedLease %s: %w", klog.KRef(namespace, name), err)
	}
	if len(marked.Items) == 0 {
		return nil
	}
	live := &fencingv1alpha1.FencedLease{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, live)
	switch {
	case err == nil && live.UID != uid:
		ctrl.LoggerFrom(ctx).V(4).Info("A FencedLease of the same name exists again; leaving its pods to it", "uid", live.UID)
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
	}
	return nil
}
