package v1alpha1

// Names shared by the operator, its webhooks and the workloads. They are part
// of the API: workloads in any language rely on them.
const (
	// Prefix is the prefix of every annotation and label of the product.
	Prefix = "fencedlease.io/"

	// AnnotationFence carries a fencing token. On a pod it is the token of the
	// holder (empty on standbys). On a write to a protected object it is the
	// writer's token, and the stored object keeps the token of its last
	// accepted writer. On the Lease it is the fence of the last committed grant.
	AnnotationFence = Prefix + "fence"

	// AnnotationRole is "holder" or "standby" on a candidate pod.
	AnnotationRole = Prefix + "role"

	// AnnotationLease names the FencedLease that selects a candidate pod.
	AnnotationLease = Prefix + "lease"

	// LabelLease marks a pod as a candidate of the FencedLease it names. The
	// operator sets it on every candidate it publishes to, so that it can
	// find them all in one list from the API server before it publishes a
	// new holder.
	LabelLease = Prefix + "lease"

	// AnnotationGrant is the fence of the grant that the operator last
	// published, or was about to publish, while it marked the pod. Before a
	// new holder is published every candidate is marked with the new grant:
	// that changes each pod's resourceVersion, so a publication of an older
	// grant still in flight (a paused operator replica) fails its optimistic
	// lock instead of making a second holder.
	AnnotationGrant = Prefix + "grant"

	// LabelProtectedBy marks an object as protected by the FencedLease it
	// names (in the same namespace): only the current holder may write it.
	// Which resources are protected is the fencing webhook's configuration
	// (ConfigMaps and Secrets by default).
	LabelProtectedBy = Prefix + "protected-by"

	// LabelShard, beside LabelProtectedBy, says that the object is
	// protected by a shard of a FencedShardSet: LabelProtectedBy names the
	// set, LabelShard the shard's key. Only the shard's current owner may
	// write it, with the shard's current fence.
	LabelShard = Prefix + "shard"

	// LabelShardSet marks the Lease of a shard with the FencedShardSet it
	// belongs to (the Lease is named "<set>-<key>" and carries LabelShard
	// too), and a candidate pod of a set with the set's name.
	LabelShardSet = Prefix + "shard-set"

	// AnnotationShards, on a candidate pod of a FencedShardSet, lists the
	// shards the pod owns with their fences, as a JSON object of key to
	// fence (a decimal string): {"3":"41210","17":"41302"}. The pod
	// webhook projects it to ShardsFile. A shard appears only once its
	// grant is committed, and is removed once it is revoked.
	AnnotationShards = Prefix + "shards"

	// AnnotationShardsMark, on a FencedShardSet's candidate pod, changes
	// every time the operator marks the pod: once a shard it owned has
	// moved on, before the shard is published to its new owner, so that a
	// publication of the older grant still in flight (a paused operator
	// replica) fails its optimistic lock.
	AnnotationShardsMark = Prefix + "shards-mark"

	// LeaseAnnotationPreviousHolders, on a shard's Lease, lists the pods
	// ("<name>/<uid>", comma-separated) of the committed grants that the
	// current grant replaced and whose marks are not known to have landed:
	// the pods the operator marks before it publishes the shard again.
	LeaseAnnotationPreviousHolders = Prefix + "previous-holders"

	// FieldManagerFence marks the fence that a write to a subresource of a
	// protected object (status, scale) carries in its field manager: a
	// subresource write cannot change the object's metadata, so it cannot
	// carry the fence annotation. The field manager of such a write ends
	// with it: "<manager>;fencedlease.io/fence=<N>".
	FieldManagerFence = ";" + Prefix + "fence="

	// LabelInject opts a pod in to the pod webhook, which mounts the token
	// files into its containers.
	LabelInject = Prefix + "inject"

	// ConditionHolder is the pod condition that the readiness gate waits for:
	// True on the holder, False on standbys.
	ConditionHolder = Prefix + "holder"

	// RoleHolder and RoleStandby are the values of AnnotationRole.
	RoleHolder  = "holder"
	RoleStandby = "standby"

	// TokenDir is where the pod webhook mounts the token files.
	TokenDir = "/etc/fencedlease"

	// ShardsFile is the token file that lists a shard set's candidate pod's
	// shards (AnnotationShards).
	ShardsFile = TokenDir + "/shards"

	// AnnotationHandoffRequestedAt on a FencedLease asks the operator to hand
	// the grant over to another eligible candidate, as maxHoldSeconds does:
	// the grant of the current holder is revoked and, following the takeover
	// policy (Safe waits for it to expire), another candidate is granted with
	// a higher fence. Its value identifies the request (kubectl fence handoff
	// writes the time, in RFC 3339); a request is handled once, and the
	// status records it in lastHandledHandoffAt.
	AnnotationHandoffRequestedAt = Prefix + "handoff-requested-at"

	// Finalizer lets the operator clear pod annotations and delete the Lease
	// before a FencedLease goes away.
	Finalizer = Prefix + "finalizer"

	// LeaseFinalizer keeps a deleted Lease, the record of its grant, until
	// that grant is over: the operator revokes it, waits as a takeover
	// would, and only then lets the Lease go and re-creates it.
	LeaseFinalizer = Prefix + "lease-record"
)

// Annotations the operator keeps on the coordination.k8s.io Lease. Together
// with spec.holderIdentity they make the Lease the single record of a grant.
const (
	// LeaseAnnotationHolderUID is the UID of the pod named in holderIdentity.
	LeaseAnnotationHolderUID = Prefix + "holder-uid"

	// LeaseAnnotationState is the state of the grant: pending, held, revoked
	// or released.
	LeaseAnnotationState = Prefix + "state"

	// LeaseAnnotationRenewal is the renewal mode of the grant (Operator or
	// Holder): a holder renews its grant only when it says Holder.
	LeaseAnnotationRenewal = Prefix + "renewal"

	// LeaseAnnotationHandoff is the handoff request (the value of the
	// FencedLease's AnnotationHandoffRequestedAt) that the grant's revoke or
	// the new grant carried out, so that a request is carried out once.
	LeaseAnnotationHandoff = Prefix + "handoff"

	// LeaseAnnotationRenewInterval is how often, in seconds, a holder that
	// renews its own grant renews it.
	LeaseAnnotationRenewInterval = Prefix + "renew-interval"

	// LeaseAnnotationVouchedBy names the operator's heartbeat Lease
	// (namespace/name) that keeps a held grant of renewal Operator valid:
	// every renewal of the heartbeat renews every grant held that names it,
	// and the grant's own Lease is written only when the grant changes and
	// once every refresh interval (design.md, "A quiet lease").
	LeaseAnnotationVouchedBy = Prefix + "vouched-by"

	// LeaseAnnotationLeaseDuration is the FencedLease's lease duration in
	// seconds, on a vouched grant: the wait of takeover Safe counts it from
	// the grant's last renewal, its own or its heartbeat's. The Lease's
	// spec.leaseDurationSeconds then covers the refresh interval too, so
	// that a reader of the Lease alone never sees a held grant expired.
	LeaseAnnotationLeaseDuration = Prefix + "lease-duration"

	// HeartbeatAnnotationBeats on the operator's heartbeat Lease counts its
	// renewals: a process that missed some of them can tell how many.
	HeartbeatAnnotationBeats = Prefix + "beats"

	// LabelHeartbeat marks the operator's heartbeat Lease.
	LabelHeartbeat = Prefix + "heartbeat"
)

// Values of LeaseAnnotationState.
const (
	// LeaseStatePending: a grant was written but not yet committed. A pending
	// grant is never published; it is superseded by a fresh grant.
	LeaseStatePending = "pending"
	// LeaseStateHeld: the grant is committed; its fence is AnnotationFence.
	LeaseStateHeld = "held"
	// LeaseStateRevoked: the grant is no longer renewed; it is over once it
	// has expired.
	LeaseStateRevoked = "revoked"
	// LeaseStateReleased: the holder said that it stopped (its work ended,
	// or it is shutting down): the grant is over at once.
	LeaseStateReleased = "released"
)
