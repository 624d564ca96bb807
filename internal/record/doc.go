// Package record is the one codec of the records the operator keeps on the
// objects it shares with others: the grant on a FencedLease's Lease (its
// annotations, besides spec.holderIdentity) and the publication on a
// candidate pod (its label and annotations, which the pod's token files
// come from), and the fence, their number.
//
// Every reader and writer of those records goes through it: the
// controller, the fencing webhook, the fence gateway, the workload library
// (pkg/fence, so it depends on the standard library alone), the simulation
// and the test checkers. A fence is parsed here and nowhere else, by one
// rule: a canonical positive decimal int64. The names are those of
// api/v1alpha1, which documents them; record_test.go holds the two
// together.
package record
