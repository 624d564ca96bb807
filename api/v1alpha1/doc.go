// Package v1alpha1 contains the FencedLease API, group fencing.fencedlease.io.
//
// A FencedLease declares the candidate pods of a singleton workload. The
// operator grants exactly one of them the lease at a time and hands it a
// fencing token: a number that grows with every grant, so that the
// destination of a write can reject anything older than what it has already
// accepted.
//
// +kubebuilder:object:generate=true
// +groupName=fencing.fencedlease.io
package v1alpha1
