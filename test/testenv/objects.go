package testenv

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// FencedLease returns a FencedLease of the namespace whose candidates carry
// the labels, with a 15s lease and the API's other defaults; mutate, if not
// nil, changes it further.
func FencedLease(namespace, name string, labels map[string]string, mutate func(*fencingv1alpha1.FencedLease)) *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: fencingv1alpha1.FencedLeaseSpec{
			Selector:             metav1.LabelSelector{MatchLabels: labels},
			LeaseDurationSeconds: 15,
		},
	}
	if mutate != nil {
		mutate(fl)
	}
	return fl
}
