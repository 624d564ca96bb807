// Package cluster starts and stops a local Kubernetes cluster made of real
// control-plane processes on this machine — etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler — and kwok, which simulates the
// nodes (their heartbeats on node Leases) and the pods: Deployments and
// StatefulSets create pods that are scheduled and become Running and Ready,
// but no container runs. Beside kwok's nodes, real nodes (Config.RealNodes,
// realnode.go) run a containerd and a kubelet of this machine each, in a
// mount namespace of their own, with every file they write under the
// cluster's directory: the pods that select them run as real containers.
// make cluster, make demo and test/e2e use it; it is not part of the
// operator.
//
// The operator runs beside it as a local process (StartOperator), installed
// from the chart and authenticated as the chart's ServiceAccount, with the
// chart's webhook configurations pointed at it by URL.
package cluster
