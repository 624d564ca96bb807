package fencedshardset

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Name is the controller's name, in logs, metrics and Events.
const Name = "fencedshardset"

// Reconciler reconciles FencedShardSets.
type Reconciler struct {
	client.Client
	// APIReader reads the shards' Leases from the API server: the grants
	// are decided, and published to the pods, from what the API server
	// holds, never from a cache that may lag behind a move.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Writers is how many shards' Leases are written at once.
	Writers int

	revoked revocations
	unowned unownedSince
}

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedshardsets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedshardsets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedshardsets/finalizers,verbs=update

// Reconcile moves one FencedShardSet's shards toward its plan: read the
// pods, then the Leases; decide; write the Leases; publish to the pods;
// record the status (deferred, so a failed step is recorded too).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	set := &fencingv1alpha1.FencedShardSet{}
	if err := r.Get(ctx, req.NamespacedName, set); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetMetrics(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !set.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, set)
	}
	if !controllerutil.ContainsFinalizer(set, fencingv1alpha1.Finalizer) {
		base := set.DeepCopy()
		controllerutil.AddFinalizer(set, fencingv1alpha1.Finalizer)
		if err := r.Patch(ctx, set, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("add the finalizer of FencedShardSet %s: %w", req, err)
		}
	}
	s := &scope{set: set, base: set.DeepCopy(), now: r.Clock.Now()}
	defer func() {
		if err := r.recordStatus(ctx, s, retErr); err != nil && retErr == nil {
			retErr = err
		}
	}()
	for _, step := range []func(context.Context, *scope) error{r.readInputs, r.writeGrants, r.retireOrphans, r.publish, r.deleteRetired} {
		if err := step(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		if s.invalid != "" {
			return ctrl.Result{}, nil
		}
	}
	return s.result(), nil
}

// reconcileDelete ends every grant of the set and takes every shard from
// its pods, so that no pod goes on believing it owns a shard of a set that
// is gone; then it lets the set go. The grants are revoked first; then
// every pod the set published to, and every pod a Lease named, is written
// (read from the API server, marked), so that a publication still in
// flight from a paused replica fails; then the Leases are deleted, each on
// the version revoked (retireOrphans, deleteRetired).
func (r *Reconciler) reconcileDelete(ctx context.Context, set *fencingv1alpha1.FencedShardSet) error {
	if !controllerutil.ContainsFinalizer(set, fencingv1alpha1.Finalizer) {
		return nil
	}
	key := client.ObjectKeyFromObject(set)
	leases := &coordinationv1.LeaseList{}
	if err := r.APIReader.List(ctx, leases, client.InNamespace(set.Namespace), client.MatchingLabels{record.LabelShardSet: set.Name}); err != nil {
		return fmt.Errorf("list the Leases of FencedShardSet %s: %w", key, err)
	}
	// The cache may still show a set that is gone, and whose name a new
	// set has taken: the pods and their shards are then the new set's.
	// Read after the Leases, a live set of this UID existed after their
	// list, so a set created since under its name granted every one of
	// its shards with a fence above the list's resourceVersion: only
	// fences up to it are taken from the pods.
	live := &fencingv1alpha1.FencedShardSet{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("read FencedShardSet %s: %w", key, err))
	}
	if live.UID != set.UID || !controllerutil.ContainsFinalizer(live, fencingv1alpha1.Finalizer) {
		return nil
	}
	upTo, err := strconv.ParseInt(leases.ResourceVersion, 10, 64)
	if err != nil {
		upTo = math.MaxInt64
	}
	s := &scope{set: set, marks: map[string]string{}, now: r.Clock.Now()}
	for i := range leases.Items {
		if metav1.IsControlledBy(&leases.Items[i], set) {
			s.orphans = append(s.orphans, &leases.Items[i])
		}
	}
	if err := r.retireOrphans(ctx, s); err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(set.Namespace), client.MatchingLabels{record.LabelShardSet: set.Name}); err != nil {
		return fmt.Errorf("list the pods of FencedShardSet %s: %w", key, err)
	}
	s.pods = map[string]*corev1.Pod{}
	later := map[string]map[string]int64{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		s.pods[pod.Name] = pod
		shards, _ := record.ParseShards(pod.Annotations[record.AnnotationShards])
		for k, f := range shards {
			if f > upTo {
				if later[pod.Name] == nil {
					later[pod.Name] = map[string]int64{}
				}
				later[pod.Name][k] = f
			}
		}
	}
	if err := r.markAndTake(ctx, s, later, s.marks); err != nil {
		return err
	}
	if err := r.deleteRetired(ctx, s); err != nil {
		return err
	}
	// On the version read live: never the finalizer of a set created
	// since under the same name.
	base := live.DeepCopy()
	controllerutil.RemoveFinalizer(live, fencingv1alpha1.Finalizer)
	if err := r.Patch(ctx, live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the finalizer of FencedShardSet %s: %w", key, err)
	}
	r.forgetMetrics(key)
	return nil
}

// SetupWithManager registers the controller: a set is reconciled when it
// changes, when one of its Leases does, and when a pod it selects (or
// published to) does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Writers <= 0 {
		r.Writers = 8
	}
	registerMetrics()
	return ctrl.NewControllerManagedBy(mgr).
		For(&fencingv1alpha1.FencedShardSet{}).
		Owns(&coordinationv1.Lease{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.setsForPod)).
		Watches(&fencingv1alpha1.FencedShardSet{}, handler.EnqueueRequestsFromMapFunc(r.otherSets)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allSets), builder.WithPredicates(nodeHealthChanged())).
		Named(Name).
		Complete(r)
}

// setsForPod maps a pod to the sets that select it or published to it.
func (r *Reconciler) setsForPod(ctx context.Context, o client.Object) []reconcile.Request {
	sets := &fencingv1alpha1.FencedShardSetList{}
	if err := r.List(ctx, sets, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List FencedShardSets for a pod", "pod", client.ObjectKeyFromObject(o))
		return nil
	}
	var out []reconcile.Request
	for _, set := range sets.Items {
		sel, err := metav1.LabelSelectorAsSelector(&set.Spec.Selector)
		selected := err == nil && sel.Matches(labels.Set(o.GetLabels()))
		if selected || o.GetLabels()[fencingv1alpha1.LabelShardSet] == set.Name {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&set)})
		}
	}
	return out
}

// otherSets maps a set to the other sets of its namespace: a set that
// starts or stops selecting a pod changes whether the others may give it
// shards.
func (r *Reconciler) otherSets(ctx context.Context, o client.Object) []reconcile.Request {
	sets := &fencingv1alpha1.FencedShardSetList{}
	if err := r.List(ctx, sets, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List FencedShardSets", "namespace", o.GetNamespace())
		return nil
	}
	var out []reconcile.Request
	for _, set := range sets.Items {
		if set.UID != o.GetUID() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&set)})
		}
	}
	return out
}

// allSets maps a node whose health changed to every set: a pod on a node
// that is lost, or found again, changes eligibility without a change of
// the pod itself. Node health changes are rare.
func (r *Reconciler) allSets(ctx context.Context, _ client.Object) []reconcile.Request {
	sets := &fencingv1alpha1.FencedShardSetList{}
	if err := r.List(ctx, sets); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List FencedShardSets for a node")
		return nil
	}
	out := make([]reconcile.Request, 0, len(sets.Items))
	for i := range sets.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&sets.Items[i])})
	}
	return out
}

// nodeHealthChanged lets through the node updates that change whether
// the node is lost (holder.NodeLost), and every create and delete.
func nodeHealthChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return holder.NodeLost(o.Name, o) != holder.NodeLost(n.Name, n)
	}}
}

// leaseDuration is the set's lease duration.
func leaseDuration(set *fencingv1alpha1.FencedShardSet) time.Duration {
	return time.Duration(max(set.Spec.LeaseDurationSeconds, 1)) * time.Second
}
