// Package fencing holds the pure decision logic of the fencing webhook: given
// an admission request for a protected object (operation, the metadata of
// the old and new object, the caller), the grant of the FencedLease that
// protects it and the configured principals, it says whether the write is
// allowed, with a reason code for metrics and a message that names the
// object, the presented and the current fence.
//
// Nothing here talks to the API server. Precheck settles everything that
// needs no FencedLease (the principals, the label, the form of the fence,
// and callers that are not pods, which are denied whatever fence they
// present), so such requests cost no read. For the rest the webhook reads
// the grant as the API server holds it at that moment (the FencedLease's
// Lease, read without a cache) and calls Decide: a decision made on a cache
// that lags could admit a stale holder's create or delete after the webhook
// itself had admitted a write of the newer grant, and two webhook replicas
// have two caches.
package fencing
