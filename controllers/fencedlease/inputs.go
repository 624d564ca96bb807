package fencedlease

import (
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// pods is what one reconcile knows of the pods of a FencedLease.
type pods struct {
	// selected are the pods spec.selector selects, by name.
	selected []corev1.Pod
	// stray carry this FencedLease's label or annotations without being
	// selected any more: they are cleared.
	stray []corev1.Pod
	// candidates are the selected pods as internal/holder sees them, in the
	// order of selected.
	candidates []holder.Candidate
	// overlaps names the other FencedLeases that select some of our pods.
	overlaps []string
}

// candidate says whether the pod is a candidate of this FencedLease alone:
// selected, and not selected by another FencedLease as well.
func (p *pods) candidate(uid types.UID) bool {
	c, ok := holder.Find(p.candidates, uid)
	return ok && c.Ineligible != holder.IneligibleOverlap
}

// invalidSelectorError says that spec.selector cannot be used.
type invalidSelectorError struct{ err error }

func (e invalidSelectorError) Error() string { return "spec.selector is invalid: " + e.err.Error() }

// gatherPods reads the pods of a FencedLease from the cache: those its
// selector selects, those that still carry its label or annotations, and the
// nodes the selected ones run on.
func (r *Reconciler) gatherPods(ctx context.Context, fl *fencingv1alpha1.FencedLease, mem *memory) (*pods, error) {
	sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector)
	if err != nil {
		return nil, invalidSelectorError{err: err}
	}
	if sel.Empty() {
		return nil, invalidSelectorError{err: fmt.Errorf("it selects every pod of the namespace")}
	}
	selected, marked, err := r.listPods(ctx, fl, sel, mem)
	if err != nil {
		return nil, err
	}
	out := &pods{selected: selected}
	sort.Slice(out.selected, func(i, j int) bool { return out.selected[i].Name < out.selected[j].Name })
	overlapping := map[string]bool{}
	for i := range out.selected {
		pod := &out.selected[i]
		others := without(r.selecting(ctx, pod), fl.Name)
		for _, name := range others {
			overlapping[name] = true
		}
		node, err := r.nodeOf(ctx, pod)
		if err != nil {
			return nil, err
		}
		out.candidates = append(out.candidates, holder.NewCandidate(pod, len(others) > 0, node))
	}
	for name := range overlapping {
		out.overlaps = append(out.overlaps, name)
	}
	sort.Strings(out.overlaps)
	for i := range marked {
		if pod := &marked[i]; !sel.Matches(labels.Set(pod.Labels)) {
			out.stray = append(out.stray, *pod)
		}
	}
	sort.Slice(out.stray, func(i, j int) bool { return out.stray[i].Name < out.stray[j].Name })
	return out, nil
}

func without(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// nodeOf reads the node a pod runs on; nil when it does not exist.
func (r *Reconciler) nodeOf(ctx context.Context, pod *corev1.Pod) (*corev1.Node, error) {
	if pod.Spec.NodeName == "" {
		return nil, nil
	}
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get node %s of pod %s/%s: %w", pod.Spec.NodeName, pod.Namespace, pod.Name, err)
	}
	return node, nil
}

// fenceFloor is the highest fence ever published for the FencedLease that the
// operator can trust: the status and the Lease (written only by the operator,
// which admission enforces) and its own memory. A new fence must be greater.
// Annotations that others may write — pods, protected objects — never count:
// a forged one must not be able to block every grant.
func (r *Reconciler) fenceFloor(s *scope) int64 {
	return holder.MaxFence(s.recorded.Fence, s.fl.Status.Fence, fenceAnnotation(s.lease.Annotations), s.mem.maxFence)
}

// listPods lists the pods a FencedLease selects and those marked with its
// label: from the cache, or, while that cache may be ahead of a store that
// went back (regression.go), from the API server, whose versions the pod
// writes must carry to apply, until no pod in the cache is ahead.
func (r *Reconciler) listPods(ctx context.Context, fl *fencingv1alpha1.FencedLease, sel labels.Selector, mem *memory) (selected, marked []corev1.Pod, err error) {
	if selected, marked, err = r.listCachedPods(ctx, fl, sel); err != nil {
		return nil, nil, err
	}
	if !mem.isAhead(podCache) {
		return selected, marked, nil
	}
	var liveSelected, liveMarked corev1.PodList
	if err := r.APIReader.List(ctx, &liveSelected, client.InNamespace(fl.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, fmt.Errorf("list pods of FencedLease %s/%s from the API server: %w", fl.Namespace, fl.Name, err)
	}
	if err := r.APIReader.List(ctx, &liveMarked, client.InNamespace(fl.Namespace), client.MatchingLabels{fencingv1alpha1.LabelLease: fl.Name}); err != nil {
		return nil, nil, fmt.Errorf("list pods marked for FencedLease %s/%s from the API server: %w", fl.Namespace, fl.Name, err)
	}
	if !podsAhead(slices.Concat(selected, marked), slices.Concat(liveSelected.Items, liveMarked.Items)) {
		mem.caughtUp(podCache)
		return selected, marked, nil
	}
	return liveSelected.Items, liveMarked.Items, nil
}

// podsAhead says whether a cached pod is at a version later than the same
// pod as the API server has it.
func podsAhead(cached, live []corev1.Pod) bool {
	stored := make(map[types.UID]string, len(live))
	for i := range live {
		stored[live[i].UID] = live[i].ResourceVersion
	}
	for i := range cached {
		if rv, ok := stored[cached[i].UID]; ok && record.MaybeNewer(cached[i].ResourceVersion, rv) {
			return true
		}
	}
	return false
}

// listCachedPods lists from the cache the pods a FencedLease selects and
// those marked with its label.
func (r *Reconciler) listCachedPods(ctx context.Context, fl *fencingv1alpha1.FencedLease, sel labels.Selector) (selected, marked []corev1.Pod, err error) {
	if selected, err = r.podsSelected(ctx, fl.Namespace, &fl.Spec.Selector, sel); err != nil {
		return nil, nil, fmt.Errorf("list pods of FencedLease %s/%s: %w", fl.Namespace, fl.Name, err)
	}
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(fl.Namespace), client.MatchingFields{indexPodLabels: fencingv1alpha1.LabelLease + "=" + fl.Name}); err != nil {
		return nil, nil, fmt.Errorf("list pods marked for FencedLease %s/%s: %w", fl.Namespace, fl.Name, err)
	}
	return selected, list.Items, nil
}
