package fencedlease

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// fencedLeasesForPod maps a pod to the FencedLeases of its namespace that
// select it, and to the one named in its annotations (which may no longer
// select it and must clear them).
func (r *Reconciler) fencedLeasesForPod(ctx context.Context, obj client.Object) []reconcile.Request {
	var list fencingv1alpha1.FencedLeaseList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list FencedLeases for a pod", "namespace", obj.GetNamespace())
		return nil
	}
	var reqs []reconcile.Request
	named := obj.GetAnnotations()[fencingv1alpha1.AnnotationLease]
	for i := range list.Items {
		fl := &list.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector)
		if fl.Name == named || (err == nil && sel.Matches(labels.Set(obj.GetLabels()))) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}})
		}
	}
	return reqs
}
