// Package restore shows what the operator does when the control plane's
// etcd is restored from a snapshot, on the HA control plane of test/cluster
// (three etcd members, two API servers). A restore rewinds every stored
// record, and with it the etcd revision, from which fences are derived: a
// plain restore hands out revisions, and so fences, that were handed out
// before. The test takes a snapshot, lets grants and protected writes move
// on, restores the snapshot (plainly, and with etcdutl's --bump-revision and
// --mark-compacted), restarts the control plane, and records every fence
// published and every protected write accepted, before and after. It prints
// the fences and checks what docs/operations.md ("Restoring etcd") says:
// no fence at or below one published before the restore is published again
// while the operator remembers it (Degraded FenceRegression, a Warning
// event), and after a bumped restore the operator carries on by itself.
//
// The test carries the build tag restore (make test-restore, part of make
// test). This file has no tag, so that the package always compiles.
package restore
