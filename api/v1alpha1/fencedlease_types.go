package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TakeoverPolicy says when a new holder may be granted after the current one
// stops being eligible.
// +kubebuilder:validation:Enum=Safe;Immediate
type TakeoverPolicy string

const (
	// TakeoverSafe grants a new holder only after the old grant has expired:
	// a full lease duration after the last renewal the operator saw confirmed.
	// A paused old holder that still believes it holds the lease has had the
	// whole lease duration to notice that it lost it.
	TakeoverSafe TakeoverPolicy = "Safe"

	// TakeoverImmediate grants a new holder as soon as the old one is no longer
	// eligible, without waiting for its grant to expire. The old holder may
	// still be running and may still try to write: this is correct only because
	// every protected write is fenced and the destination rejects the old
	// holder's lower token. Use it when every side effect of the workload is
	// fenced (protected ConfigMaps and Secrets, fenced SQL) and fast failover
	// matters more than avoiding overlapping execution.
	TakeoverImmediate TakeoverPolicy = "Immediate"
)

// RenewalMode says who renews a grant.
// +kubebuilder:validation:Enum=Operator;Holder
type RenewalMode string

const (
	// RenewalOperator means that the operator renews the grant while the holder pod is
	// eligible. The holder learns that it lost the lease when the kubelet
	// rewrites its token files: usually within a second, but not while its
	// node is partitioned, and not while its process is paused. Takeover
	// Safe bounds the operator's view of the grant, not the holder's. Works
	// with any workload: nothing in the pod talks to the API server.
	RenewalOperator RenewalMode = "Operator"

	// RenewalHolder means that the holder pod renews its own grant (a compare-and-swap
	// update of the Lease's renewTime, with its own service-account token),
	// and stops acting as holder on its own monotonic clock, a lease
	// duration (minus a safety margin) after its last successful renewal was
	// sent, whatever its files say and whether or not it can reach the API
	// server. The operator still grants and revokes, and judges expiry from
	// the renewals it observes; a holder that stops renewing (paused,
	// partitioned, on a lost node) is replaced after one lease duration, and
	// with takeover Safe it has stopped by its own clock before anyone else
	// is granted. Needs a holder that renews: the fence package's Session
	// or fence run, and a service account allowed to get, watch and update
	// its Lease.
	RenewalHolder RenewalMode = "Holder"
)

// FencedLeaseSpec declares the candidate pods of a singleton workload and the
// timing of their lease.
//
// +kubebuilder:validation:XValidation:rule="!has(self.renewIntervalSeconds) || self.renewIntervalSeconds < self.leaseDurationSeconds",message="renewIntervalSeconds must be less than leaseDurationSeconds"
// +kubebuilder:validation:XValidation:rule="self.maxHoldSeconds == 0 || self.maxHoldSeconds >= self.leaseDurationSeconds",message="maxHoldSeconds must be 0 (unlimited) or at least leaseDurationSeconds"
type FencedLeaseSpec struct {
	// selector selects the candidate pods, in the namespace of the FencedLease.
	// It must not be empty: an empty selector would make every pod of the
	// namespace a candidate. A pod selected by two FencedLeases is never
	// granted by either.
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must not be empty: set matchLabels or matchExpressions"
	Selector metav1.LabelSelector `json:"selector"`

	// leaseDurationSeconds is how long a grant stays valid without renewal.
	// With takeover Safe it is also how long a dead holder blocks the next one.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// renewIntervalSeconds is how often the operator renews the grant of an
	// eligible holder. It must be less than leaseDurationSeconds; when unset
	// it is a third of leaseDurationSeconds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3599
	// +optional
	RenewIntervalSeconds *int32 `json:"renewIntervalSeconds,omitempty"`

	// maxHoldSeconds bounds how long one grant may last. When it is reached and
	// another candidate is eligible, the holder is rotated: its grant is
	// revoked and, following the takeover policy, the next candidate gets a new
	// grant with a higher fence. 0 means unlimited. When set, it must be at
	// least leaseDurationSeconds.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	// +optional
	MaxHoldSeconds int32 `json:"maxHoldSeconds,omitempty"`

	// takeover says when a new holder may be granted after the current one
	// stops being eligible: Safe (the default) waits until the old grant has
	// expired; Immediate grants at once and relies on fencing alone to reject
	// the old holder's writes.
	// +kubebuilder:default=Safe
	// +optional
	Takeover TakeoverPolicy `json:"takeover,omitempty"`

	// readinessGate asks the pod webhook to add the readiness gate
	// "fencedlease.io/holder" to candidate pods, so that only the holder is
	// Ready and a Service routes to it alone. Eligibility uses the
	// ContainersReady condition, which the gate does not affect.
	// +optional
	ReadinessGate bool `json:"readinessGate,omitempty"`

	// renewal says who renews a grant: Operator (the default) or Holder. A
	// change applies at once: the current holder, if still eligible, gets a
	// new grant (with a higher fence) under the new mode.
	// +kubebuilder:default=Operator
	// +optional
	Renewal RenewalMode `json:"renewal,omitempty"`

	// paused keeps the current holder (it is still renewed while eligible, and
	// still revoked when it stops being eligible) but grants nothing new.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// HolderRef identifies the pod that holds the lease.
type HolderRef struct {
	// podName is the name of the holder pod.
	PodName string `json:"podName"`
	// podUID is the UID of the holder pod. A pod re-created with the same name
	// is a different pod and does not inherit the grant.
	PodUID types.UID `json:"podUID"`
	// nodeName is the node the holder pod runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// FencedLeaseStatus is the observed state of the lease.
type FencedLeaseStatus struct {
	// holder is the pod that holds the committed grant, if any.
	// +optional
	Holder *HolderRef `json:"holder,omitempty"`

	// fence is the fencing token of the current grant: the resourceVersion of
	// the Lease at the grant write. It strictly increases with every grant.
	// When there is no holder it keeps the last fence, so that the next one
	// can be checked against it.
	// +optional
	Fence int64 `json:"fence,omitempty"`

	// acquireTime is when the current grant was written.
	// +optional
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`

	// renewTime is when the current grant was last renewed, as recorded
	// here: a renewal that changes nothing else is recorded at most every
	// minute (the operator's --status-renewal-interval), and at most every
	// 5 minutes while the operator is under load. The Lease's renewTime is
	// the current one.
	// +optional
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`

	// expireTime is when the current grant expires unless renewed after
	// renewTime; it may be past while the Lease shows later renewals. It is
	// for people: the operator judges expiry on its own monotonic clock, and
	// kubectl fence status shows the time left from the Lease.
	// +optional
	ExpireTime *metav1.MicroTime `json:"expireTime,omitempty"`

	// transitions counts the grants written to the Lease.
	// +optional
	Transitions int32 `json:"transitions,omitempty"`

	// leaseResourceVersion is the resourceVersion of the Lease that this
	// status records. The operator never records a Lease older than this
	// one, so that neither a lagging cache nor a late write can move the
	// status back to an earlier grant: the fencing webhook trusts it.
	// +optional
	LeaseResourceVersion string `json:"leaseResourceVersion,omitempty"`

	// candidates is the number of eligible candidate pods.
	// +optional
	Candidates int32 `json:"candidates,omitempty"`

	// observedGeneration is the generation of the spec that the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastHandledHandoffAt is the value of the annotation
	// fencedlease.io/handoff-requested-at that the operator last handled:
	// a handoff is requested by setting the annotation to a new value (the
	// time of the request, by convention), and is carried out once, or
	// refused with an Event when no other candidate is eligible.
	// +optional
	LastHandledHandoffAt string `json:"lastHandledHandoffAt,omitempty"`

	// conditions: Held (a committed holder exists), Degraded (the operator
	// cannot do its job as asked: overlapping selectors, a fence regression, an
	// invalid selector) and Ready (Held and not Degraded).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FencedLease grants one of its candidate pods a lease with a fencing token.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fl,categories=fencedlease
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder.podName`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fence`
// +kubebuilder:printcolumn:name="Candidates",type=integer,JSONPath=`.status.candidates`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Renewal",type=string,JSONPath=`.spec.renewal`,priority=1
// +kubebuilder:printcolumn:name="Takeover",type=string,JSONPath=`.spec.takeover`,priority=1
type FencedLease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the candidates and the lease timing.
	// +required
	Spec FencedLeaseSpec `json:"spec"`

	// status is the observed state of the lease.
	// +optional
	Status FencedLeaseStatus `json:"status,omitempty"`
}

// FencedLeaseList is a list of FencedLeases.
//
// +kubebuilder:object:root=true
type FencedLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencedLease `json:"items"`
}
