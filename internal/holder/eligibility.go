package holder

import (
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
}

// Eligible reports whether the candidate may hold the lease.
func (c Candidate) Eligible() bool { return c.Ineligible == "" }

// NewCandidate derives a Candidate from a selected pod. overlapping says that
// another FencedLease selects the pod too, which is a user error: such a pod
// is never granted.
//
// Eligibility uses ContainersReady, not Ready: with the readiness gate only
// the holder is Ready, and standbys must still be able to take over.
func NewCandidate(pod *corev1.Pod, overlapping bool) Candidate {
	c := Candidate{Name: pod.Name, UID: pod.UID, NodeName: pod.Spec.NodeName}
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
	}
	return c
}
