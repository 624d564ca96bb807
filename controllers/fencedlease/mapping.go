package fencedlease

import (
	"context"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Cache indexes of the controller.
const (
	// indexSelectorTerms indexes FencedLeases by the "key=value" pairs of
	// their selector's matchLabels, or by "*" when it has none, so that the
	// FencedLeases that may select a pod are found from the pod's labels
	// without reading every FencedLease of the namespace.
	indexSelectorTerms = "fencedlease.io/selector-terms"
	// indexPodNode indexes pods by the node they run on.
	indexPodNode = "spec.nodeName"
	// indexPodLabels indexes pods by each "key=value" pair of their labels,
	// so that the pods of a selector are found without reading every pod of
	// the namespace.
	indexPodLabels = "fencedlease.io/pod-labels"
	// anySelector is the term of a selector without matchLabels.
	anySelector = "*"
)

// Index is a field index the controller reads the cache with; the manager's
// cache must have every one of Indexes registered.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// Indexes are the cache indexes the controller reads with.
func Indexes() []Index {
	return []Index{
		{Object: &fencingv1alpha1.FencedLease{}, Field: indexSelectorTerms, Extract: selectorTerms},
		{Object: &corev1.Pod{}, Field: indexPodNode, Extract: func(o client.Object) []string {
			if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
				return []string{n}
			}
			return nil
		}},
		{Object: &corev1.Pod{}, Field: indexPodLabels, Extract: labelTerms},
	}
}

func labelTerms(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out
}

// podsSelected lists the pods of the namespace that a selector selects: by
// one of its matchLabels pairs through the label index, then the whole
// selector; or, for a selector of expressions only, every pod of the
// namespace.
func (r *Reconciler) podsSelected(ctx context.Context, namespace string, ls *metav1.LabelSelector, sel labels.Selector) ([]corev1.Pod, error) {
	var list corev1.PodList
	if len(ls.MatchLabels) == 0 {
		if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	keys := make([]string, 0, len(ls.MatchLabels))
	for k := range ls.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	term := keys[0] + "=" + ls.MatchLabels[keys[0]]
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexPodLabels: term}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for i := range list.Items {
		if sel.Matches(labels.Set(list.Items[i].Labels)) {
			out = append(out, list.Items[i])
		}
	}
	return out, nil
}

func selectorTerms(o client.Object) []string {
	fl := o.(*fencingv1alpha1.FencedLease)
	if len(fl.Spec.Selector.MatchLabels) == 0 {
		return []string{anySelector}
	}
	out := make([]string, 0, len(fl.Spec.Selector.MatchLabels))
	for k, v := range fl.Spec.Selector.MatchLabels {
		out = append(out, k+"="+v)
	}
	return out
}

// selecting returns the FencedLeases of the pod's namespace that select it,
// by name. Deleting FencedLeases select nothing.
func (r *Reconciler) selecting(ctx context.Context, pod client.Object) []string {
	terms := []string{anySelector}
	for k, v := range pod.GetLabels() {
		terms = append(terms, k+"="+v)
	}
	seen := map[string]bool{}
	var out []string
	for _, term := range terms {
		var list fencingv1alpha1.FencedLeaseList
		if err := r.List(ctx, &list, client.InNamespace(pod.GetNamespace()), client.MatchingFields{indexSelectorTerms: term},
			client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot list FencedLeases by selector", "namespace", pod.GetNamespace())
			continue
		}
		for i := range list.Items {
			fl := &list.Items[i]
			if seen[fl.Name] || fl.DeletionTimestamp != nil {
				continue
			}
			seen[fl.Name] = true
			if sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector); err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.GetLabels())) {
				out = append(out, fl.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// fencedLeasesForPod maps a pod to the FencedLeases that select it, and to the
// one named by its label or annotation (which may no longer select it and
// must clear them).
func (r *Reconciler) fencedLeasesForPod(ctx context.Context, obj client.Object) []reconcile.Request {
	names := r.selecting(ctx, obj)
	for _, named := range []string{obj.GetLabels()[fencingv1alpha1.LabelLease], obj.GetAnnotations()[fencingv1alpha1.AnnotationLease]} {
		if named != "" {
			names = append(names, named)
		}
	}
	return requests(obj.GetNamespace(), names)
}

// fencedLeasesForNode maps a node to the FencedLeases of the pods on it.
func (r *Reconciler) fencedLeasesForNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.MatchingFields{indexPodNode: obj.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list the pods of a node", "node", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		out = append(out, r.fencedLeasesForPod(ctx, &list.Items[i])...)
	}
	return out
}

func requests(namespace string, names []string) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: n}})
		}
	}
	return out
}

// leaseChanged lets through Lease events that change what the operator
// reads of a Lease (its annotations, spec, owners, deletion; not its
// labels, which it neither reads nor writes), other than an operator's
// renewal: a write that changes nothing but renewTime of a grant the operator renews
// (its own renewal, or another replica's) needs no reconcile of its own; the
// next one, which the grant's timing schedules, observes it, later rather
// than sooner: on the side of a later expiry. A holder's own renewal (renewal
// Holder) does get one: the operator judges the grant's expiry from when it
// observes the holder's renewals, and observing them only when the grant
// would expire made a holder that stopped renewing lose its grant up to two
// lease durations after its last renewal instead of one.
func leaseChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*coordinationv1.Lease), e.ObjectNew.(*coordinationv1.Lease)
			if record.ParseLease(n.Annotations).Renewal == string(fencingv1alpha1.RenewalHolder) {
				return true
			}
			if !o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
				!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) {
				return true
			}
			os, ns := o.Spec.DeepCopy(), n.Spec.DeepCopy()
			os.RenewTime, ns.RenewTime = nil, nil
			return !equality.Semantic.DeepEqual(os, ns)
		},
	}
}

// fencedLeaseChanged lets through FencedLease events that ask for a
// reconcile: a new spec, a deletion, changed metadata, or a status that
// records another grant (whose holder is then published). A status that only
// records a renewal, or new conditions, asks for nothing.
func fencedLeaseChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*fencingv1alpha1.FencedLease), e.ObjectNew.(*fencingv1alpha1.FencedLease)
			if o.Generation != n.Generation || !n.DeletionTimestamp.IsZero() || !equality.Semantic.DeepEqual(o.Finalizers, n.Finalizers) ||
				!equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) {
				return true
			}
			return o.Status.Fence != n.Status.Fence || o.Status.Transitions != n.Status.Transitions ||
				!equality.Semantic.DeepEqual(o.Status.Holder, n.Status.Holder)
		},
	}
}

// nodeHealthChanged lets through node events that can change eligibility:
// creation, deletion, and updates that change whether the node is lost. The
// kubelet's heartbeats change nothing else the operator reads.
func nodeHealthChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return holder.NodeLost(o.Name, o) != holder.NodeLost(n.Name, n)
		},
	}
}
