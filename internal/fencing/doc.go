// Package fencing holds the pure decision logic of the fencing webhook: given
// an admission request for a protected ConfigMap or Secret (operation, the
// metadata of the old and new object, the caller), the state of the
// FencedLease that protects it and the configured principals, it says whether
// the write is allowed, with a reason code for metrics and a message that
// names the object, the presented and the current fence.
//
// Nothing here talks to the API server. Precheck settles everything that
// needs no FencedLease (the principals, the label, the form of the fence,
// and callers that are not pods, which are denied whatever fence they
// present), so such requests cost no read. For the rest the webhook reads
// the FencedLease from its informer cache and calls Decide; when the cache may lag behind a
// newer grant (a fence higher than the cached one, a caller pod that is not
// the cached holder, a FencedLease missing from the cache), Decide asks for a
// fresh read instead of denying, and the webhook decides once more with the
// FencedLease read from the API server. A cache is never ahead of the API
// server and fences only increase, so every other denial is final.
package fencing
