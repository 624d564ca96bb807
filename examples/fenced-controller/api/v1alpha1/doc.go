// Package v1alpha1 is the API of the example fenced controller: a Widget,
// which the controller gives a slot (unique in its namespace, in its spec,
// as an allocator writes its allocation) and whose status it keeps.
// Two active controllers would hand out the same slot twice: the split
// brain that fencing prevents.
//
// +kubebuilder:object:generate=true
// +groupName=examples.fencedlease.io
package v1alpha1
