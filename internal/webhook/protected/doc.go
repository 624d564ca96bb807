// Package protected is the validating admission webhook that enforces
// fencing tokens at the destination (the fencing webhook): it decides writes
// to protected objects (label fencedlease.io/protected-by), rejecting them
// from anyone but the current holder of the FencedLease, with its current
// fence. An object that carries the label fencedlease.io/shard too is
// protected by that shard of the FencedShardSet that protected-by names:
// only the shard's current owner may write it, with the shard's fence.
//
// It is a raw admission.Handler rather than a typed CustomValidator because
// the rules need the caller's user info (pod identity from a bound
// service-account token, operator and break-glass principals) and the
// metadata of the stored object. It decodes only object metadata, so Secret
// data is never held or logged. The rules themselves live in
// internal/fencing; this package gathers their inputs and acts on the result:
// for a pod's write or delete it reads the grant from the Lease of the
// FencedLease, or of the shard ("<set>-<key>"), on the API server (the
// informer cache only says which FencedLease or FencedShardSet protects the
// object, and which shards a set has; a caller that is not a pod costs no
// read at all),
// records Events and counts decisions in Prometheus
// metrics whose label values come from fixed sets, never from a request. A
// dry run gets the same answer without an Event or a decision counted as a
// write. The handler is served only under the secret path of
// internal/webhook/endpoint, so only the API server's requests reach it.
package protected
