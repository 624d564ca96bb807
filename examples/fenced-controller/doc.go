// Command fenced-controller is the example fenced controller: a
// controller-runtime program that gives each Widget a slot (unique in its
// namespace) and keeps its status, in several replicas of which one acts.
//
// With --fenced-lease it runs as a candidate of that FencedLease
// (pkg/fencedcontroller): its controller runs only while its pod holds the
// grant, and every write it makes carries the grant's fence, so that the
// fencing webhook rejects the writes of a replica that lost its grant. With
// --leader-elect it uses controller-runtime's leader election instead, for
// comparison: a replica that lost the election and has not noticed yet
// writes on. With --fenced-shard-set and --shards it runs as one of the
// pods of that FencedShardSet (fencedcontroller.NewShardedManager): every
// replica acts, each on the Widgets of the shards its pod holds (a
// Widget's shard is the hash of its name), and a slot is unique among the
// Widgets of a shard. docs/controllers.md shows how main.go differs from a stock
// kubebuilder one.
//
// Every write is logged as a JSON line with the message "Write" (the
// Widget, the part written, the verb, the outcome and the fence), so that
// the tests can count them. --late-writes makes the process, once its
// manager has stopped because the replica lost its grant or election, keep
// writing its Widgets for that long, as a replica that does not notice its
// loss would: a demonstration of the split brain, not a way to run.
package main
