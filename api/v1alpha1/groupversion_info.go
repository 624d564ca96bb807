package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "fencing.fencedlease.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	// It is apimachinery's, not controller-runtime's, so that workloads can
	// import this package without pulling in controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &FencedLease{}, &FencedLeaseList{}, &FencedShardSet{}, &FencedShardSetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
