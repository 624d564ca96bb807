// Package testenv runs the integration tests against a real kube-apiserver and
// etcd (controller-runtime's envtest, with the binaries that hack/tools.sh
// builds), and plays the parts that a cluster without nodes lacks: it creates
// pods and sets their status as the kubelet would, and it acts as a pod with a
// bound service-account token from the TokenRequest API.
package testenv
