package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FencedShardSetSpec is the desired state of a FencedShardSet: the
// candidate pods of a sharded workload, its shards, and how each shard is
// granted. Each shard is a fenced lease of its own: one owner at a time, a
// fence that grows with every grant of it.
//
// +kubebuilder:validation:XValidation:rule="(has(self.shards) && self.shards > 0) != (has(self.keys) && size(self.keys) > 0)",message="set exactly one of shards (a count) and keys (a list)"
type FencedShardSetSpec struct {
	// Selector selects the candidate pods in the set's namespace. Every
	// eligible candidate (running, containers ready, not being deleted, on
	// a node that is not lost) is given an even share of the shards.
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must not be empty: set matchLabels or matchExpressions"
	Selector metav1.LabelSelector `json:"selector"`

	// Shards is the number of shards, keyed "0" to "shards-1". Set it or
	// Keys.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Shards int32 `json:"shards,omitempty"`

	// Keys are the shards by name (a tenant, a partition). Each is a DNS
	// label: the shard's Lease is named "<set>-<key>". Set it or Shards.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	Keys []string `json:"keys,omitempty"`

	// LeaseDurationSeconds is how long a shard's grant lasts after the
	// operator last vouched for it. Under takeover Safe a shard moves only
	// once its old owner's grant has been revoked for this long.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// Takeover is how a shard moves: Safe waits out the old owner's lease
	// after revoking it, Immediate grants it to the new owner at once and
	// relies on the fence at the destination.
	// +kubebuilder:default=Safe
	Takeover TakeoverPolicy `json:"takeover,omitempty"`

	// Renewal is who renews the grants. Only Operator is supported: the
	// operator vouches for a pod's shards while the pod is eligible.
	// +kubebuilder:default=Operator
	// +kubebuilder:validation:XValidation:rule="self == 'Operator'",message="only Operator renewal is supported for a FencedShardSet"
	Renewal RenewalMode `json:"renewal,omitempty"`

	// JoinDelaySeconds is how long a newly eligible pod waits before shards
	// are taken from live owners for it; shards without a live owner are
	// given to it at once. It keeps a rolling update from moving every
	// shard twice (docs/shards.md).
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	JoinDelaySeconds *int32 `json:"joinDelaySeconds,omitempty"`

	// MaxMovesPerInterval caps the shards taken from live owners in one
	// plan; a plan cut short is made again a lease duration later, or
	// sooner when the set's pods or Leases change (the cap bounds each
	// plan, not the moves per interval). 0: no cap. Shards without a live
	// owner are always placed.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	MaxMovesPerInterval *int32 `json:"maxMovesPerInterval,omitempty"`
}

// FencedShardSetStatus counts the shards; each shard's grant is recorded on
// its Lease ("<set>-<key>"), as a Deployment's status counts its pods
// without listing them.
type FencedShardSetStatus struct {
	// Shards is the number of shards of the spec.
	Shards int32 `json:"shards,omitempty"`
	// Owned counts the shards whose grant is committed and whose owner is
	// eligible.
	Owned int32 `json:"owned,omitempty"`
	// Moving counts the shards being revoked or waiting for their new
	// grant (under Safe, for their old owner's lease to run out).
	Moving int32 `json:"moving,omitempty"`
	// Pods counts the eligible candidate pods.
	Pods int32 `json:"pods,omitempty"`
	// Moves counts the shards given to a new owner since the set was
	// created.
	Moves int64 `json:"moves,omitempty"`
	// ObservedGeneration is the generation of the spec last acted on.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (every shard owned), Degraded (something is wrong
	// that the operator cannot fix alone).
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FencedShardSet spreads a set of fenced shards over the eligible pods of a
// workload.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name: at most 63 characters: the set's name is the value of the labels fencedlease.io/shard-set and fencedlease.io/protected-by"
// +kubebuilder:resource:shortName=fss,categories=fencedlease
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.status.shards`
// +kubebuilder:printcolumn:name="Owned",type=integer,JSONPath=`.status.owned`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.pods`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Takeover",type=string,JSONPath=`.spec.takeover`,priority=1
type FencedShardSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FencedShardSetSpec   `json:"spec"`
	Status FencedShardSetStatus `json:"status,omitempty"`
}

// FencedShardSetList is a list of FencedShardSets.
//
// +kubebuilder:object:root=true
type FencedShardSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencedShardSet `json:"items"`
}
