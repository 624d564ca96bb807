// Package sim is a deterministic simulation of the FencedLease controller.
//
// It runs the real reconciler of controllers/fencedlease, several replicas of
// it at once, against a simulated API server: every object keeps its history
// of resourceVersions, every write is a compare-and-swap where the real API
// server makes it one, and every replica reads through informer caches that
// lag behind by a distance the simulation chooses. One seeded PRNG makes
// every nondeterministic choice: which replica's next API call runs (of a
// reconcile that runs two steps at once, the next call of either), which
// cache catches up and by how much, which reply is lost after its write was
// applied, which replica pauses or crashes, which pod or node changes, and how
// far the clock moves. A replica may start with a pod cache that has not yet
// delivered every pod, and delivers nothing for a while (Config.PodsBehind),
// drawn from a generator of its own. Now and then a replica pauses right
// before one of its writes, which it applies when it resumes
// (Config.PausesBeforeWrites): the stalled process of the lock's story. A
// run is a pure function of its seed,
// so a failure is replayed exactly and a failing seed becomes a regression
// test.
//
// The enforcement side runs too. Every pod has a workload process (fence run
// and its command) that learns what it holds late, as a real one does: with
// holder renewal from its own watch of the Lease (renewing its grant,
// believing it holds until its last renewal's send time plus the lease
// duration, less a margin), with operator renewal from its token files;
// both lag by a distance the simulation chooses. While it believes it holds,
// and for a grace period after it noticed the end of its grant (never past
// its deadline with holder renewal), its command writes protected objects:
// updates, creates, deletes, now and then as an impostor with a fence read
// off the object. Each write is handled as the API server handles it: the
// object is read, a replica of the fencing webhook decides it with the
// handler the webhook runs (its own FencedLease cache lagging, its live
// reads scheduling points), and the write is a compare-and-swap on the
// version decided on, decided again when that changed. The workloads'
// renewals and releases, and a namespace editor's attempts at the
// operator's state, go through the admission policy (policy.Allows, held to
// the real policy by its test).
//
// After every write the checker verifies the invariants of the lock:
// at most one pod is published as holder at any instant, published fences
// only grow and were committed before they were published, a FencedLease's
// status never moves back to an older grant, with takeover Safe no grant
// is written while the previous one may still be valid, and with holder
// renewal no other pod is granted while a process may still act on its own
// grant (invariant 8, FencedLeases deleted and created again included). On
// every decision of the webhook it checks invariant 4 (once a grant is
// committed, nothing from another pod or with an older fence is admitted),
// on every protected write applied invariant 3 (fences never go back on an
// object, and no holder deletes what the holder of a newer grant wrote),
// and that no replica ever changes a condition the kubelet owns. A run ends
// by settling (Config.Settle): the faults stop, and every FencedLease with
// an eligible candidate must come to be held, published and recorded, with
// its pods' holder conditions in line (liveness).
//
// A run with Config.Shards simulates FencedShardSets instead (shards.go):
// several replicas of the real reconciler of controllers/fencedshardset,
// each with its own lagging caches and a live reader of the store's head,
// over one or two sets (four to eight counted shards or a list of keys,
// takeover Safe or Immediate per set, a join delay and now and then a cap
// on moves, all chosen by the seed), and pods that join, are deleted,
// flap ready and not ready, fail, and whose nodes are lost and come back;
// with the same faults (lost requests and replies, pauses before a write
// applied on resume, crashes, pod caches behind). After every write the
// shard checker (shardcheck.go) verifies each shard: at most one pod
// publishes it (annotation fencedlease.io/shards) at any instant, its
// published fences only grow, never go to two pods, and a pod never
// regains one it lost (internal/invariant's Publications, the rules of
// test/testenv's ShardChecker); every fence published to a pod was
// committed to that pod on the shard's Lease before; the committed fences
// grow with every grant and one fence goes to one pod (invariant.Grants);
// and under Safe no grant of a shard to another pod is committed unless
// the previous owner's grant was revoked a lease duration before or more,
// on the simulated clock. The settling phase then asks of every set with
// an eligible pod that each shard be held by an eligible pod, published to
// it alone with its Lease's fence, and the shards balanced (within one of
// each other), and that nothing be left of a shard a set no longer has, or
// of a set that is gone: no Lease, no publication. With
// ShardsConfig.SpecChanges the sets' user also resizes them, switches their
// takeover policy, deletes them and creates them again (shardspec.go), and
// the garbage collector deletes the Leases whose set is gone. The
// enforcement side (protected objects of shards) is not simulated for
// shard sets.
package sim
