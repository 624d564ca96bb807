// Package fences3 makes fenced, idempotent writes to any S3-compatible
// object store, through the AWS SDK for Go v2: the seeds' "immutable
// versioned objects and a current pointer updated with compare-and-set".
//
// An object store cannot compare a fence: it has no "WHERE last_fence <
// :token". It can make a write conditional on an object's ETag (If-Match) or
// on its absence (If-None-Match: *), and that is enough. A fenced object
// named K is two kinds of S3 objects:
//
//	K                 the pointer: a small JSON document with the fence of
//	                  its last writer, the key of the current version, the
//	                  operation ID that wrote it and a sequence number
//	K.versions/<id>-<fence>
//	                  one immutable object per write, <id> derived from the
//	                  operation ID (a SHA-256), never overwritten
//
// [Store.Put] writes the version (If-None-Match: *), then moves the pointer
// with If-Match on the ETag it read, and only if the pointer's fence is not
// higher than the writer's: the same check as the SQL helper's
// "last_fence <= :fence". An equal fence is accepted: fences are unique per
// grant, so an equal fence is the same holder writing again. If another
// writer moved the pointer in between, the store answers 412 and Put reads
// the pointer again and decides again. Readers resolve the pointer
// ([Store.Get]), so they see a version only once it is current.
//
// Every pointer document is unique (its sequence number grows by one with
// every move), so its ETag is too, even on stores whose ETag is a hash of
// the content: a compare-and-set on it cannot be fooled by a write of the
// same bytes (the ABA problem).
//
// A write whose reply is lost (a timeout, a reset connection) has an unknown
// outcome. Put never retries it blindly: it reads back. The version key is
// derived from the operation ID and the fence, so a second attempt by the
// same grant finds the first one's version instead of adding another, and a
// stale holder's version never stands in the way of a newer holder's. The
// pointer records the operation ID and fence of its writer and of the
// writers of the RecentOps moves before, so Put tells "applied" from "not
// applied" by reading the pointer; only when more than RecentOps other
// writes moved the pointer in the meantime does it return
// ErrUnknownOutcome. A later Put with the same operation ID (a replay after
// a crash) returns ErrAlreadyApplied and changes nothing when the pointer
// lists the operation; when it does not, and an earlier attempt's version
// shows that attempt read the pointer before the moves it still remembers,
// whether it moved the pointer can no longer be known, and the replay is
// refused with ErrOutcomeLost rather than applied a second time.
//
// The fence answers "which ownership generation is authorised?", the
// operation ID "is this a replay of the same action?" (the seeds keep them
// apart). This package checks the order of fences at the store; it does not
// know who holds a grant. Anyone who may write the bucket can claim any
// fence: where writers are not trusted to present their own fence, put the
// fence gateway (cmd/fence-gateway) in front of the store instead. See
// docs/storage.md.
//
// Old versions are never deleted by this package. Expire them with a
// lifecycle rule on the ".versions/" keys if needed: Get reads the pointer
// again when the version it names is gone.
//
// The package depends on pkg/fence and the AWS SDK only.
package fences3
