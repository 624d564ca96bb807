// Package gateway is the logic of fence-gateway: an S3-compatible HTTP
// proxy that fences writes to any S3-compatible object store.
//
// A write (PUT object, copy, DELETE object) carries the caller's pod-bound
// service-account token (HeaderToken) and its fence (HeaderFence). The
// gateway authenticates the token with a TokenReview (the pod's name and UID
// come from the token, as the fencing webhook gets them), maps the bucket
// and key to a FencedLease by configuration, reads that FencedLease's Lease
// from the API server (never from a cache: a second replica has its own, and
// caches lag) and admits the write only from the current holder pod with the
// current fence. A route may name a FencedShardSet instead: the first path
// segment after the route's prefix is the shard key, and the shard's Lease
// ("<set>-<key>", the same grant record) is read instead on every write,
// the set from a short cache (ShardRoute, ReadShardGrant). It keeps each object's last accepted fence in the object's
// user metadata (MetaFence) and makes every write conditional on the
// object's ETag (If-Match, or If-None-Match: * when absent), after checking
// the presented fence against the stored one: two gateway replicas cannot
// interleave a check and a write. Upstream requests are signed with the
// gateway's own credentials; the caller's token is never forwarded.
//
// Reads pass through (authenticated, no fence needed). Rejections are S3
// XML error responses. docs/storage.md is the user's guide.
//
// Pure decisions (grant.go, decide.go, request.go) are apart from I/O
// (handler.go, upstream.go, kube.go).
package gateway
