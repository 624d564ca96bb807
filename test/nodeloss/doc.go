// Package nodeloss tests failover when the holder's node is lost, with the
// real node lifecycle controller of kube-controller-manager deciding that it
// is. It has its own control plane: that controller marks every node that
// does not heartbeat as lost, which would upset the other suites' nodes.
package nodeloss
