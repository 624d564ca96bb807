// Command demo shows the operator at work on the local cluster (make
// cluster), installed from the Helm chart, narrating with timestamps, and
// leaves the cluster running to look around. It has two scenes.
//
// The workload scene (make demo) runs a three-replica Deployment whose pods
// compete for a FencedLease: who holds the lease and its fence, a protected
// write by the holder, the holder's pod deleted, the old holder's write
// rejected, a node that fails, and a rolling update — then a summary.
//
// The controller scene (make demo-controller) runs the example fenced
// controller (examples/fenced-controller) from its own manifest, in two
// replica processes that act as the Deployment's pods with tokens bound to
// them: the holder is paused with SIGSTOP past its deadline, the other is
// granted with a higher fence, and the old one, resumed, writes on and has
// every write rejected; then the same on client-go's leader election, whose
// paused leader's late writes are accepted — then the two side by side.
package main
