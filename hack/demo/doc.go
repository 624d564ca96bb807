// Command demo shows the operator doing its job on a real control plane
// built from source: it starts kube-apiserver and etcd, runs the operator
// binary against them, applies config/samples, plays the kubelet for three
// candidate pods, kills the holder, and shows the next one take over with a
// higher fence. Run it with 'make demo'.
package main
