package podinject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Decision is what the webhook does with a labelled pod.
type Decision struct {
	// Selected names the FencedLeases that select the pod, sorted. When it
	// is empty the pod is admitted unchanged.
	Selected []string
	// ReadinessGate says whether to add the fencedlease.io/holder gate.
	ReadinessGate bool
	// Sets names the FencedShardSets that select the pod, sorted. The pod
	// gets the token files when a FencedLease or a set selects it.
	Sets []string
	// Warnings are returned to the client that creates the pod.
	Warnings []string
}

// Decide chooses what to inject into a pod from the FencedLeases of its
// namespace. A FencedLease selects the pod as the controller sees it: same
// namespace, and a valid spec.selector that matches the pod's labels (an
// empty selector, which the CRD rejects, selects nothing).
//
// A pod selected by several FencedLeases is a user error that the controller
// reports and never grants; it still gets the files (they say standby), a
// warning, and the readiness gate if any of them asks for it: a pod that
// cannot hold the lease must not become Ready where the user wants only the
// holder to be.
func Decide(pod *corev1.Pod, fls []fencingv1alpha1.FencedLease, sets []fencingv1alpha1.FencedShardSet) Decision {
	var d Decision
	for i := range fls {
		fl := &fls[i]
		if fl.Namespace != pod.Namespace || !selects(&fl.Spec.Selector, pod) {
			continue
		}
		d.Selected = append(d.Selected, fl.Name)
		d.ReadinessGate = d.ReadinessGate || fl.Spec.ReadinessGate
	}
	for i := range sets {
		if sets[i].Namespace == pod.Namespace && selects(&sets[i].Spec.Selector, pod) {
			d.Sets = append(d.Sets, sets[i].Name)
		}
	}
	slices.Sort(d.Selected)
	slices.Sort(d.Sets)
	switch {
	case len(d.Selected) == 0 && len(d.Sets) == 0:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s has label %s=true but no FencedLease or FencedShardSet in namespace %q selects it: no token files are mounted",
			describePod(pod), fencingv1alpha1.LabelInject, pod.Namespace))
	case len(d.Selected) > 1:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s is selected by several FencedLeases (%s): none of them will grant it the lease",
			describePod(pod), strings.Join(d.Selected, ", ")))
	}
	if len(d.Sets) > 1 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s is selected by several FencedShardSets (%s): none of them will give it shards",
			describePod(pod), strings.Join(d.Sets, ", ")))
	}
	return d
}

// Injects says whether the pod gets the token files.
func (d Decision) Injects() bool { return len(d.Selected) > 0 || len(d.Sets) > 0 }

func selects(selector *metav1.LabelSelector, pod *corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels))
}
