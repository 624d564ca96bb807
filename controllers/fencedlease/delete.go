package fencedlease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// reconcileDelete releases everything a FencedLease being deleted holds: the
// pods lose its annotations (and the holder condition), then the Lease is
// deleted, then the finalizer goes. The Lease is deleted here rather than left
// to the garbage collector so that deletion is complete when the FencedLease
// is gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, fl *fencingv1alpha1.FencedLease) error {
	if !controllerutil.ContainsFinalizer(fl, fencingv1alpha1.Finalizer) {
		return nil
	}
	var all corev1.PodList
	if err := r.List(ctx, &all, client.InNamespace(fl.Namespace)); err != nil {
		return fmt.Errorf("list pods in namespace %s: %w", fl.Namespace, err)
	}
	for i := range all.Items {
		if pod := &all.Items[i]; pod.Annotations[fencingv1alpha1.AnnotationLease] == fl.Name {
			if err := r.publish(ctx, fl, pod, nil); err != nil {
				return err
			}
		}
	}
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}, l)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get Lease %s/%s: %w", fl.Namespace, fl.Name, err)
	case metav1.IsControlledBy(l, fl):
		if err := client.IgnoreNotFound(r.Delete(ctx, l, client.Preconditions{UID: &l.UID})); err != nil {
			return fmt.Errorf("delete Lease %s: %w", klog.KObj(l), err)
		}
	}
	r.observations.forget(client.ObjectKeyFromObject(fl))
	base := fl.DeepCopy()
	controllerutil.RemoveFinalizer(fl, fencingv1alpha1.Finalizer)
	if err := client.IgnoreNotFound(r.Patch(ctx, fl, client.MergeFrom(base))); err != nil {
		return fmt.Errorf("remove finalizer from FencedLease %s: %w", klog.KObj(fl), err)
	}
	return nil
}
