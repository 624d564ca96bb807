package fencedlease

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// pods is what one reconcile knows of the pods of a FencedLease.
type pods struct {
	// selected are the candidate pods, by spec.selector.
	selected []corev1.Pod
	// stray carry this FencedLease's annotations without being selected any
	// more: their annotations are removed.
	stray []corev1.Pod
	// candidates are the selected pods as internal/holder sees them.
	candidates []holder.Candidate
	// overlaps names the other FencedLeases that select some of our pods.
	overlaps []string
}

// invalidSelectorError says that spec.selector cannot be used.
type invalidSelectorError struct{ err error }

func (e invalidSelectorError) Error() string { return "spec.selector is invalid: " + e.err.Error() }

// gatherPods reads the pods of the namespace from the cache once and sorts
// them into candidates, strays, and overlaps with other FencedLeases.
func (r *Reconciler) gatherPods(ctx context.Context, fl *fencingv1alpha1.FencedLease) (*pods, error) {
	sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector)
	if err != nil {
		return nil, invalidSelectorError{err: err}
	}
	var all corev1.PodList
	if err := r.List(ctx, &all, client.InNamespace(fl.Namespace)); err != nil {
		return nil, fmt.Errorf("list pods in namespace %s: %w", fl.Namespace, err)
	}
	others, err := r.otherSelectors(ctx, fl)
	if err != nil {
		return nil, err
	}
	out := &pods{}
	overlapping := map[string]bool{}
	for i := range all.Items {
		pod := &all.Items[i]
		if !sel.Matches(labels.Set(pod.Labels)) {
			if pod.Annotations[fencingv1alpha1.AnnotationLease] == fl.Name {
				out.stray = append(out.stray, *pod)
			}
			continue
		}
		overlap := false
		for name, other := range others {
			if other.Matches(labels.Set(pod.Labels)) {
				overlap, overlapping[name] = true, true
			}
		}
		out.selected = append(out.selected, *pod)
		out.candidates = append(out.candidates, holder.NewCandidate(pod, overlap))
	}
	for name := range overlapping {
		out.overlaps = append(out.overlaps, name)
	}
	return out, nil
}

// otherSelectors returns the selectors of the other FencedLeases of the
// namespace. One with an invalid selector selects nothing.
func (r *Reconciler) otherSelectors(ctx context.Context, fl *fencingv1alpha1.FencedLease) (map[string]labels.Selector, error) {
	var list fencingv1alpha1.FencedLeaseList
	if err := r.List(ctx, &list, client.InNamespace(fl.Namespace)); err != nil {
		return nil, fmt.Errorf("list FencedLeases in namespace %s: %w", fl.Namespace, err)
	}
	out := map[string]labels.Selector{}
	for i := range list.Items {
		other := &list.Items[i]
		if other.Name == fl.Name || other.DeletionTimestamp != nil {
			continue
		}
		if s, err := metav1.LabelSelectorAsSelector(&other.Spec.Selector); err == nil && !s.Empty() {
			out[other.Name] = s
		}
	}
	return out, nil
}

// fenceFloor is the highest fence ever published for the FencedLease that the
// operator can know of: the status, the Lease, the pods and its own memory. A
// new fence must be greater. (Protected ConfigMaps and Secrets are not read:
// the operator has no access to them.)
func (r *Reconciler) fenceFloor(_ context.Context, s *scope) (int64, error) {
	floor := holder.MaxFence(s.fl.Status.Fence, fenceAnnotation(s.lease.Annotations), r.observations.maxFence(s.key))
	for _, list := range [][]corev1.Pod{s.pods.selected, s.pods.stray} {
		for i := range list {
			if list[i].Annotations[fencingv1alpha1.AnnotationLease] == s.fl.Name {
				floor = holder.MaxFence(floor, fenceAnnotation(list[i].Annotations))
			}
		}
	}
	return floor, nil
}
