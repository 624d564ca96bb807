// Package e2e holds the end-to-end tests (build tag e2e, make test-e2e): the
// operator installed from the Helm chart into the local cluster of
// test/cluster (real etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler; kwok's simulated nodes and pods), two operator processes
// behind one webhook address, and real Deployments and StatefulSets whose
// pods the ReplicaSet and StatefulSet controllers create. The tests act as
// the workload's pods with tokens bound to them, fail nodes, restart the
// operator and take a webhook replica down, while a watch checks that no
// two pods ever hold at once. On failure they print the namespace's
// objects and events and the operators' logs.
package e2e
