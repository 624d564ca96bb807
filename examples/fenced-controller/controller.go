package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// labelProtectedBy marks an object as protected by a FencedLease.
const labelProtectedBy = "fencedlease.io/protected-by"

// +kubebuilder:rbac:groups=examples.fencedlease.io,resources=widgets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=examples.fencedlease.io,resources=widgets/status,verbs=get;update;patch

// WidgetReconciler gives each Widget a slot and keeps its status.
type WidgetReconciler struct {
	client.Client
	// Pod is this replica's pod, recorded in the status.
	Pod string
	// ProtectedBy, when set, is the FencedLease whose label the controller
	// puts on the Widgets it writes, so that the fencing webhook protects
	// them: in the write that carries its fence.
	ProtectedBy string
	// Sharded, when set, is the manager of a pod of a FencedShardSet: the
	// controller reconciles the Widgets of the shards the pod holds, and a
	// slot is unique among the Widgets of a shard.
	Sharded *fencedcontroller.ShardedManager
	// Resync is how often a Widget is reconciled again.
	Resync time.Duration
	// lastFence is the fence of the grant the controller last acted under.
	lastFence atomic.Int64
}

// SetupWithManager registers the controller.
func (r *WidgetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A status write is no reason to reconcile again (its own would loop);
	// Resync brings every Widget back.
	if r.Sharded != nil {
		return r.Sharded.Controller("widget", &examplesv1alpha1.Widget{}, r, predicate.GenerationChangedPredicate{})
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&examplesv1alpha1.Widget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("widget").Complete(r)
}

// Reconcile protects the Widget, gives it a slot if it has none, and
// writes its status.
func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	w := &examplesv1alpha1.Widget{}
	if err := r.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	fenceValue, _ := fencedcontroller.FenceFromContext(ctx)
	if fenceValue > 0 {
		r.lastFence.Store(fenceValue)
	}
	if err := r.reconcileSpec(ctx, log, w, fenceValue); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileStatus(ctx, log, w, fenceValue); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// reconcileSpec labels the Widget protected and gives it the lowest slot
// no other Widget of its namespace has, in one update.
func (r *WidgetReconciler) reconcileSpec(ctx context.Context, log logr.Logger, w *examplesv1alpha1.Widget, fenceValue int64) error {
	changed := false
	if r.ProtectedBy != "" && w.Labels[labelProtectedBy] != r.ProtectedBy {
		if w.Labels == nil {
			w.Labels = map[string]string{}
		}
		w.Labels[labelProtectedBy] = r.ProtectedBy
		changed = true
	}
	if w.Spec.Slot == nil {
		slot, err := r.freeSlot(ctx, w)
		if err != nil {
			return err
		}
		w.Spec.Slot = ptr.To(slot)
		changed = true
	}
	if !changed {
		return nil
	}
	sent := time.Now()
	err := r.Update(ctx, w)
	logWrite(log, w, "spec", "update", fenceValue, false, sent, err)
	if err != nil {
		return fmt.Errorf("give Widget %s/%s its slot: %w", w.Namespace, w.Name, err)
	}
	return nil
}

// freeSlot is the lowest slot no other Widget of w's namespace has (of
// w's shard, when sharded: only its owner gives slots there).
func (r *WidgetReconciler) freeSlot(ctx context.Context, w *examplesv1alpha1.Widget) (int32, error) {
	var list examplesv1alpha1.WidgetList
	if err := r.List(ctx, &list, client.InNamespace(w.Namespace)); err != nil {
		return 0, fmt.Errorf("list Widgets in %s: %w", w.Namespace, err)
	}
	shard := func(o client.Object) string { return "" }
	if r.Sharded != nil {
		shard = func(o client.Object) string { key, _ := r.Sharded.ShardOf(o); return key }
	}
	used := map[int32]bool{}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Spec.Slot != nil && o.Name != w.Name && shard(o) == shard(w) {
			used[*o.Spec.Slot] = true
		}
	}
	var slot int32
	for used[slot] {
		slot++
	}
	return slot, nil
}

// reconcileStatus records what this replica saw and did.
func (r *WidgetReconciler) reconcileStatus(ctx context.Context, log logr.Logger, w *examplesv1alpha1.Widget, fenceValue int64) error {
	w.Status.ObservedGeneration = w.Generation
	w.Status.Message = w.Spec.Message
	w.Status.Holder = r.Pod
	w.Status.Fence = fenceValue
	w.Status.Reconciles++
	w.Status.ReconcileTime = ptr.To(metav1.Now())
	sent := time.Now()
	err := r.Status().Update(ctx, w)
	logWrite(log, w, "status", "update", fenceValue, false, sent, err)
	if err != nil {
		return fmt.Errorf("write the status of Widget %s/%s: %w", w.Namespace, w.Name, err)
	}
	return nil
}
