package fencing

// Reason is the code of a decision: the reason label of the metric
// fencedlease_webhook_decisions_total. The set is fixed, so the label has a
// bounded number of values.
type Reason string

// Reasons of allowed requests.
const (
	// ReasonUnprotected: neither the old nor the new object carries the
	// protected-by label (the objectSelector normally keeps such requests
	// away from the webhook).
	ReasonUnprotected Reason = "unprotected"
	// ReasonOperator: the caller is the operator.
	ReasonOperator Reason = "operator"
	// ReasonBreakGlass: the caller is a break-glass user or group member;
	// the write is audited.
	ReasonBreakGlass Reason = "break_glass"
	// ReasonSystemCleanup: a DELETE by the namespace controller or the
	// garbage collector, or an UPDATE of theirs that changes only
	// ownerReferences and finalizers (orphaning).
	ReasonSystemCleanup Reason = "system_cleanup"
	// ReasonHolder: a write with the current fence by the holder pod, or a
	// DELETE by the holder pod of an object last written with that fence.
	ReasonHolder Reason = "holder"
)

// Reasons of denied requests.
const (
	// ReasonLabelChanged: the protected-by label would be removed or
	// changed, or the shard label added, removed or changed.
	ReasonLabelChanged Reason = "label_changed"
	// ReasonSubresourceMetadata: a subresource write would change the
	// stored fence annotation; only a write of the object moves it.
	ReasonSubresourceMetadata Reason = "subresource_metadata"
	// ReasonOwnerUnprotected: the write gives the object an owner that is
	// neither its FencedLease (for a shard: its FencedShardSet) nor an
	// object of a protected resource that the same FencedLease (the same
	// shard) protects: deleting that owner would make the garbage
	// collector delete the object, without a fence.
	ReasonOwnerUnprotected Reason = "owner_unprotected"
	// ReasonInvalidLabel: the protected-by label is empty, or the shard
	// label beside it.
	ReasonInvalidLabel Reason = "invalid_label"
	// ReasonMissingFence: a write without the fence annotation, or a
	// subresource write without the fence in its field manager.
	ReasonMissingFence Reason = "missing_fence"
	// ReasonMalformedFence: the fence annotation is not a canonical token.
	ReasonMalformedFence Reason = "malformed_fence"
	// ReasonObjectFenceRegression: the fence is lower than the fence stored
	// on the object by its last accepted writer.
	ReasonObjectFenceRegression Reason = "object_fence_regression"
	// ReasonStaleFence: the fence is lower than the current fence of the
	// FencedLease (or the shard): a stale holder.
	ReasonStaleFence Reason = "stale_fence"
	// ReasonUnknownFence: the fence is higher than the current fence of the
	// FencedLease (or the shard) as the API server holds it: it was never
	// granted (for a DELETE: the object was last written with such a fence).
	ReasonUnknownFence Reason = "unknown_fence"
	// ReasonLeaseNotFound: no FencedLease (or, with the shard label, no
	// FencedShardSet) of the label's name in the namespace.
	ReasonLeaseNotFound Reason = "lease_not_found"
	// ReasonUnknownShard: the FencedShardSet of the label's name has no
	// shard of the shard label's key (not in spec.keys, or not a canonical
	// decimal below spec.shards).
	ReasonUnknownShard Reason = "unknown_shard"
	// ReasonNoHolder: the FencedLease (or the shard) has no holder.
	ReasonNoHolder Reason = "no_holder"
	// ReasonNotHolder: the caller is a pod other than the current holder.
	ReasonNotHolder Reason = "not_holder"
	// ReasonWriteNotPod: a write with a well-formed fence by a caller that
	// is neither a pod nor a privileged principal, whatever the fence. A
	// fence is no secret (it is on the object for anyone to read, and a patch
	// carries the stored one over), so only a pod's bound identity shows that
	// a write comes from the holder; such a caller is decided without reading
	// the grant.
	ReasonWriteNotPod Reason = "write_not_pod"
	// ReasonDeleteNotPod: a DELETE by a caller that is neither a pod nor a
	// privileged principal; a DELETE cannot carry a fence.
	ReasonDeleteNotPod Reason = "delete_not_pod"
	// ReasonDeleteOlderWrite: a DELETE by the holder pod of an object that
	// was not last written with the current fence. A DELETE carries no
	// fence, so the holder pod's identity cannot tell its current grant
	// from an older grant of the same pod, whose process may still act
	// (paused, then woken): the holder writes the current fence on the
	// object first, then deletes that version.
	ReasonDeleteOlderWrite Reason = "delete_older_write"
)

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed says whether the request may proceed.
	Allowed bool
	// Reason is the code of the decision.
	Reason Reason
	// Message explains a denial; empty when allowed.
	Message string
	// Audit is set for break-glass writes that are persisted: log, record
	// an Event, count. A break-glass dry run is allowed without an audit.
	Audit bool
	// StaleWrite is set for a denial of a stale or impostor holder pod that
	// is persisted if allowed: the webhook records it as a StaleWriteRejected
	// Event on the FencedLease (or the FencedShardSet). Callers that are not
	// pods never produce one (their writes are denied before the grant is
	// read), and neither does a dry run.
	StaleWrite bool
	// Lease names what protects the object (Protector.String): the name of
	// the FencedLease, or "<set>/<key>" for a shard of a FencedShardSet.
	Lease string
	// Fence is the fence presented by the write, 0 if none or malformed.
	Fence int64
}
