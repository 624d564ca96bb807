// Package fencing holds the pure decision logic of the fencing webhook: given
// an admission request for a protected object (operation, the metadata of
// the old and new object, the caller), the grant of what protects it (a
// FencedLease, or a shard of a FencedShardSet: see Protector) and the
// configured principals, it says whether the write is allowed, with a
// reason code for metrics and a message that names the object, its
// protector, the presented and the current fence.
//
// Nothing here talks to the API server. Precheck settles everything that
// needs no grant (the principals, the labels, the form of the fence,
// and callers that are not pods, which are denied whatever fence they
// present), so such requests cost no read. For the rest the webhook reads
// the grant as the API server holds it at that moment (the Lease of the
// FencedLease or of the shard, read without a cache) and calls Decide: a decision made on a cache
// that lags could admit a stale holder's create or delete after the webhook
// itself had admitted a write of the newer grant, and two webhook replicas
// have two caches.
package fencing
