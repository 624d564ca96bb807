// Package chaos runs the operator, with its webhooks, against a real
// kube-apiserver and etcd while faults drawn from one seeded PRNG hit it:
// pods deleted, containers not ready, nodes lost, the operator crashing, two
// replicas without leader election, lost replies, lagging reads (of the
// controller's caches, and of the fencing webhook's cache of FencedLeases),
// Leases deleted (as the garbage collector may) and FencedLeases deleted and
// created again at once (as a user re-applying them would). Pods of several FencedLeases run
// "holder processes" that act as their pod (with its bound service-account
// token) and write protected ConfigMaps whenever they believe they hold the
// lease, some of them after a pause with a fence that may be stale. Every
// lease also protects a Service, whose status writes the API server lets
// change its metadata: after a pause, stale processes (and now and then
// impostors) try one that removes its label or moves its stored fence, and
// every such write must be refused.
//
// One FencedLease is renewed by its holders (spec.renewal: Holder, takeover
// Safe): its processes follow it with a pkg/fence Session acting as their
// pod, check Session.Valid before every write, pause as a whole process (the
// Session's requests wait too), and release their grants at times: while
// holding, with a client deadline of a few milliseconds, after the grant
// ended, and late (an older fence, once a newer grant exists: it must change
// nothing). Each process records its beliefs, from the grant HolderContext
// returned to the earlier of the noticed end and the grant's deadline; no two
// beliefs of a lease may overlap, not even by a millisecond.
//
// Two FencedShardSets (takeover Safe and Immediate, a few shards each, each
// shard protecting one ConfigMap) have candidate pods of their own, with a
// service account of their own, which the pod faults hit too (deleted and
// replaced, not ready, their node lost). Each runs a "shard process" that
// acts as its pod: it learns its shards from its pod's annotation
// fencedlease.io/shards, read at random intervals of up to 2s, as the
// kubelet projects it to /etc/fencedlease/shards, and acts on that view
// until the next read; it writes the object of each shard it believes it
// owns with the shard's fence, some writes after a pause with the fences it
// had, and now and then as an impostor: with another pod's fence of a
// shard, or with the fence of one of its shards on another shard's object.
// The history records the shards published on each pod and the grants each
// shard's Lease committed, beside the FencedLeases'.
//
// Every write attempt is recorded with its call and return time and outcome,
// along with the holders as the API server published them, and the history
// is checked afterwards: per object against a porcupine model of a fenced
// register (fences never go back in real-time order, every acknowledged write
// survives unless overwritten), and against the publications (no write
// accepted from a pod that did not hold that fence, none with an older fence
// once a newer one was granted, never two published holders), and the
// beliefs against each other (never two pods believing they hold at once).
// A shard is checked as a lease, named "<set>/<key>" in the history: every
// accepted write to its object came from the pod published as its owner
// with that fence, none with an older fence once a newer grant of the shard
// was seen, its object is a fenced register in porcupine's model, its
// Lease's committed grants have growing fences, one fence to one pod, and
// testenv.ShardChecker follows the publications (never two owners of a
// shard at once, its fence never going down). Once the faults healed, every
// shard must be published to an owner again within 30s (liveness), or the
// run reports a violation. The report counts the shard writes and moves on
// a line of their own; the other figures are the FencedLeases'.
//
// The run plays on envtest's kube-apiserver and etcd, or, with
// CHAOS_CONTROL_PLANE=ha (make chaos HA=1), on the HA control plane of
// test/cluster: three etcd members and two API servers behind a TCP
// balancer, the operator replicas, the webhook's client and the holder
// processes spread over them, and faults of its own beside the others: an
// API server restarted (crashed or stopped), the network to one cut, an etcd
// member killed and restarted, the etcd leader moved. There the history is
// read from etcd itself, which no API server restart interrupts.
// TestHAFailover times failovers there, quiet and with the operator's API
// server crashed at the same moment. Every run also records the primary
// operator's cache of FencedLeases, which the webhook decides on, and says
// how far it lagged behind the history's status: the admission window.
//
// The tests carry the build tag chaos, so that `go test ./...` skips them;
// `make chaos` runs the short run, `make chaos LONG=1` the long one.
// CHAOS_SEED replays a run's fault schedule, CHAOS_DURATION sets its length,
// CHAOS_ARTIFACTS keeps the history and the porcupine visualisation, and
// CHAOS_REPORT writes the summary to a file. CHAOS_FENCING=off removes the
// fencing webhook once the run is set up: a sanity run that must report
// violations. This file has no tag, so that the package always compiles.
package chaos
