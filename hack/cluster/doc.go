// Command cluster starts, stops and describes the local cluster of make
// cluster (test/cluster): etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok with simulated nodes, as processes that keep
// running after the command ends. With --ha the control plane is three etcd
// members and two API servers behind a TCP balancer (make cluster HA=1).
//
//	cluster up       start it, or say that it runs
//	cluster down     stop every process of it
//	cluster status   list its processes and nodes
//	cluster balance --listen 127.0.0.1:PORT BACKEND...
//	                 the balancer of an HA cluster (up starts it)
//
// Its state is in bin/cluster/ (--dir): certificates, logs, pid files and
// the kubeconfig. docs/cluster.md describes it.
package main
