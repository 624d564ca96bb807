package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// newScheme holds the types the plugin reads and writes: Kubernetes' own
// and FencedLeases. It is built here, not taken from the operator's
// internal/setup, so that the plugin links none of the operator's code.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fencingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build the scheme: %w", err)
		}
	}
	return s, nil
}
