package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WidgetSpec is what a Widget asks for, and the slot it was given.
type WidgetSpec struct {
	// Message is copied into the status by the controller.
	// +optional
	Message string `json:"message,omitempty"`
	// Slot is the slot the controller gave this Widget, unique among the
	// Widgets of its namespace: set by the controller, once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Slot *int32 `json:"slot,omitempty"`
}

// WidgetStatus is what the controller last saw and did.
type WidgetStatus struct {
	// ObservedGeneration is the generation of the spec last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Message is the spec's message, as last reconciled.
	// +optional
	Message string `json:"message,omitempty"`
	// Holder is the pod whose controller wrote this status.
	// +optional
	Holder string `json:"holder,omitempty"`
	// Fence is the fence of the grant that controller held, if it ran as
	// a FencedLease candidate.
	// +optional
	Fence int64 `json:"fence,omitempty"`
	// Reconciles counts the status writes.
	// +optional
	Reconciles int64 `json:"reconciles,omitempty"`
	// ReconcileTime is when the status was written.
	// +optional
	ReconcileTime *metav1.Time `json:"reconcileTime,omitempty"`
}

// Widget is a thing that needs a unique slot: the example of a custom
// resource written by a fenced controller.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Slot",type=integer,JSONPath=`.spec.slot`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fence`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WidgetSpec   `json:"spec,omitempty"`
	Status WidgetStatus `json:"status,omitempty"`
}

// WidgetList is a list of Widgets.
//
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}
