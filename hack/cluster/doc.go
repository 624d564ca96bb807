// Command cluster starts, stops and describes the local cluster of make
// cluster (test/cluster): etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok with simulated nodes, as processes that keep
// running after the command ends.
//
//	go run ./hack/cluster up       start it, or say that it runs
//	go run ./hack/cluster down     stop every process of it
//	go run ./hack/cluster status   list its processes and nodes
//
// Its state is in bin/cluster/ (--dir): certificates, logs, pid files and
// the kubeconfig. docs/cluster.md describes it.
package main
