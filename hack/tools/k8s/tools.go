//go:build tools

// Package tools pins the Kubernetes control-plane binaries that the tests and
// the demo run. k8s.io/kubernetes is not meant to be imported, so it lives in
// this separate module, with every staging module replaced by its published
// version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
