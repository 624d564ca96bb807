// Package fencesql makes fenced, idempotent writes to PostgreSQL, through
// database/sql or pgx v5.
//
// A fenced update carries the writer's fencing token and changes a row only
// if no newer holder has written it:
//
//	UPDATE export_targets
//	SET object_version = $1, last_fence = $2
//	WHERE id = $3 AND last_fence <= $2
//
// The comparison is <= rather than < so that the current holder can write
// the same row more than once with its token; a strictly higher stored fence
// means a newer holder has written, and the update changes nothing. Zero
// affected rows is reported as ErrStale, never as success: the token is
// stale, or the row does not exist.
//
// The fence says which holder is authorised; it does not say whether a
// request is a retry of one already applied (a timeout does not prove that
// a write failed). An operation ID answers that. [Apply] records the ID in
// the operations table and runs the fenced updates in one transaction: a
// retried ID returns ErrAlreadyApplied and changes nothing, and a stale
// attempt rolls back, so its ID is not recorded and a retry by the current
// holder can still apply it.
//
// Each protected table needs a fence column, for example
//
//	last_fence bigint NOT NULL DEFAULT 0
//
// and the operations table is created by [EnsureSchema] (see [Schema]),
// with the fences table of the scopes (see [FencesSchema]).
//
// # A fence per scope
//
// A row's fence stops an older holder only on the rows a newer one has
// written. The seeds ask more of a destination: it "remembers the highest
// fence it has seen per lock". [ApplyScoped] does that for a scope (a lock:
// a FencedLease, or one shard of a FencedShardSet, named by [LeaseScope] or
// [ShardScope]): in the same transaction it records the operation ID,
// raises the scope's fence in the fences table ([FencesTable], created by
// EnsureSchema) when the stored one is not higher, and runs the fenced
// updates. Once any write of a newer grant of the scope has committed,
// every write with an older fence fails with ErrStale, on any row, whether
// the newer holder touched it or not. The scope's row is locked until the
// transaction ends, so a concurrent older write waits and then fails; it
// never lands after the newer one committed. [RaiseFence] is the same step
// for a transaction of your own.
//
// A shard's worker takes the fence of its shard from the shards file
// (fence.ReadShards, /etc/fencedlease/shards) and writes under that
// shard's scope:
//
//	shards, err := fence.ReadShards(fence.DefaultDir)
//	f, ok := shards["eu"] // not listed: not this pod's shard, do not write
//	err = fencesql.ApplyScoped(ctx, db, fencesql.ShardScope("billing", "exporters", "eu"),
//		opID, f, updates...)
//
// ErrStale there means the shard has moved on: stop working on it.
//
// The statements use PostgreSQL syntax ($n parameters, ON CONFLICT).
package fencesql
