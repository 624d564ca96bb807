// Command demo shows the operator at work on the local cluster (make
// cluster): it installs the operator from the Helm chart, runs a
// three-replica Deployment whose pods compete for a FencedLease, and
// narrates, with timestamps, who holds the lease and its fence, a protected
// write by the holder, the holder's pod deleted, the old holder's write
// rejected, a node that fails, and a rolling update — then a summary, and
// the cluster is left running to look around. Run it with 'make demo'.
package main
