package holder

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Reasons a candidate pod is not eligible to hold the lease.
const (
	IneligibleDeleting   = "pod is being deleted"
	IneligibleNotRunning = "pod is not Running"
	IneligibleContainers = "containers are not ready"
	IneligibleOverlap    = "pod is selected by another FencedLease"
	IneligibleGone       = "pod no longer exists or is no longer selected"
	// IneligibleStoppedRenewing: with holder renewal, the holder did not
	// renew its grant within a lease duration.
	IneligibleStoppedRenewing = "the holder stopped renewing its grant"
)

// Candidate is a pod selected by a FencedLease, with what decides whether and
// in which order it may hold the lease.
type Candidate struct {
	Name     string
	UID      types.UID
	NodeName string
	// ReadySince is when ContainersReady last became True; the pod ready the
	// longest is preferred.
	ReadySince time.Time
	// Ineligible is why the pod may not hold the lease; empty when it may.
	Ineligible string
	// Terminated says that the kubelet reported every container of the pod
	// terminated for good (phase Succeeded or Failed): nothing of it runs
	// any more, so a grant it holds is as good as released.
	Terminated bool
}

// Eligible reports whether the candidate may hold the lease.
func (c Candidate) Eligible() bool { return c.Ineligible == "" }

// NewCandidate derives a Candidate from a selected pod and the node it runs
// on (nil when the node is unknown). overlapping says that another
// FencedLease selects the pod too, which is a user error: such a pod is
// never granted.
//
// Eligibility uses ContainersReady, not Ready: with the readiness gate only
// the holder is Ready, and standbys must still be able to take over.
//
// The node counts too. When a node stops reporting, the node lifecycle
// controller sets the pod's Ready condition to False but leaves
// ContainersReady as the kubelet last reported it, and evicts the pod only
// after its toleration of the unreachable taint runs out (five minutes by
// default). A pod on a node that is not Ready, or that carries the
// unreachable or not-ready NoExecute taint, is therefore not eligible.
func NewCandidate(pod *corev1.Pod, overlapping bool, node *corev1.Node) Candidate {
	c := Candidate{Name: pod.Name, UID: pod.UID, NodeName: pod.Spec.NodeName, Terminated: Terminated(pod)}
	ready := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.ContainersReady {
			ready = cond.Status == corev1.ConditionTrue
			c.ReadySince = cond.LastTransitionTime.Time
		}
	}
	switch {
	case pod.DeletionTimestamp != nil:
		c.Ineligible = IneligibleDeleting
	case pod.Status.Phase != corev1.PodRunning:
		c.Ineligible = IneligibleNotRunning
	case !ready:
		c.Ineligible = IneligibleContainers
	case overlapping:
		c.Ineligible = IneligibleOverlap
	default:
		c.Ineligible = NodeLost(pod.Spec.NodeName, node)
	}
	return c
}

// NodeLost says why a node is known to be lost, or returns "" when it is not.
// A node that does not exist is lost: its pods are orphans that the pod
// garbage collector deletes.
func NodeLost(name string, node *corev1.Node) string {
	if node == nil {
		return fmt.Sprintf("node %s does not exist", name)
	}
	for _, t := range node.Spec.Taints {
		// The NoExecute taints are the node lifecycle controller's verdict.
		// The NoSchedule ones say the same as the Ready condition, and one
		// is on every node from its registration until the controller first
		// sees it Ready.
		if (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) && t.Effect == corev1.TaintEffectNoExecute {
			return fmt.Sprintf("node %s has the taint %s:%s", name, t.Key, t.Effect)
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("node %s is not Ready (Ready=%s)", name, c.Status)
		}
	}
	return ""
}

// Terminated says whether the kubelet has reported the pod finished: phase
// Succeeded or Failed, and every container (init containers included) in
// state terminated. The phase alone is not enough: the pod garbage collector
// marks a pod Failed when it deletes it from a node that is gone, while its
// processes may still run there; only the kubelet writes container states.
// A pod that merely vanished (force-deleted on a lost node) is never
// terminated.
func Terminated(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return false
	}
	statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range statuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}
