package fencedlease_test

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func metav1IsControlledBy(obj, owner metav1.Object) bool { return metav1.IsControlledBy(obj, owner) }

func (f *fixture) lease0() *coordinationv1.Lease { return &coordinationv1.Lease{} }

func envtestAdmin() envtest.User {
	return envtest.User{Name: "admin", Groups: []string{"system:masters"}}
}
