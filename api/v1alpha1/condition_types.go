package v1alpha1

// Condition types of a FencedLease.
const (
	// ConditionHeld is True when a pod holds a committed grant.
	ConditionHeld = "Held"
	// ConditionDegraded is True when the operator cannot do what the spec asks.
	ConditionDegraded = "Degraded"
	// ConditionReady summarizes: Held and not Degraded.
	ConditionReady = "Ready"
)

// Condition reasons of a FencedLease.
const (
	// ReasonGranted: a pod holds a committed grant (Held=True).
	ReasonGranted = "Granted"
	// ReasonNoCandidates: no candidate pod is eligible (Held=False).
	ReasonNoCandidates = "NoCandidates"
	// ReasonWaitingForExpiry: the previous grant must expire before a new one
	// (takeover Safe) (Held=False).
	ReasonWaitingForExpiry = "WaitingForExpiry"
	// ReasonGranting: a grant is written but not committed and published yet
	// (Held=False).
	ReasonGranting = "Granting"
	// ReasonPaused: the FencedLease is paused and has no holder (Held=False).
	ReasonPaused = "Paused"
	// ReasonWaitingForCapacity: the operator admits no first grant, keeping
	// a margin for renewing the grants it holds; the first grant of this
	// FencedLease waits (Held=False).
	ReasonWaitingForCapacity = "WaitingForCapacity"

	// ReasonAsExpected: nothing is wrong (Degraded=False).
	ReasonAsExpected = "AsExpected"
	// ReasonFenceRegression: the API server handed out a resourceVersion that
	// is not greater than a fence already published; no grant is made.
	ReasonFenceRegression = "FenceRegression"
	// ReasonFenceUnavailable: the Lease resourceVersion is not a decimal
	// number (storage other than etcd); no fence can be derived.
	ReasonFenceUnavailable = "FenceUnavailable"
	// ReasonSelectorOverlap: a candidate pod is selected by another FencedLease
	// too; such pods are never granted.
	ReasonSelectorOverlap = "SelectorOverlap"
	// ReasonInvalidSelector: spec.selector cannot be parsed.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonLeaseConflict: a Lease of the same name exists and belongs to
	// something else; the operator leaves it alone.
	ReasonLeaseConflict = "LeaseConflict"
	// ReasonProtectionUnavailable: the fencing webhook does not check writes
	// to the protected ConfigMaps and Secrets of the FencedLease's namespace
	// (its configuration is missing, excludes the namespace, or fails open);
	// grants go on, but nothing stops a stale holder's writes there.
	ReasonProtectionUnavailable = "ProtectionUnavailable"
	// ReasonInternalError: the operator could not read its inputs.
	ReasonInternalError = "InternalError"

	// ReasonReady and ReasonNotReady summarize the other conditions.
	ReasonReady    = "Ready"
	ReasonNotReady = "NotReady"
)

// Event reasons for user-visible transitions.
const (
	EventGranted            = "Granted"
	EventLost               = "Lost"
	EventRotated            = "Rotated"
	EventReleased           = "Released"
	EventFenceRegression    = "FenceRegression"
	EventSelectorOverlap    = "SelectorOverlap"
	EventStaleWriteRejected = "StaleWriteRejected"
	EventBreakGlass         = "BreakGlassWrite"
	// EventHandoffRefused: a requested handoff was not carried out (no other
	// candidate is eligible, the FencedLease is paused, or no pod holds the
	// lease); the holder, if any, keeps its grant.
	EventHandoffRefused = "HandoffRefused"
	// EventHolderGranted and EventHolderLost are recorded on the pods: the
	// pod became the holder (its fence is published), or its grant ended.
	EventHolderGranted = "HolderGranted"
	EventHolderLost    = "HolderLost"
	// EventProtectionUnavailable: see ReasonProtectionUnavailable.
	EventProtectionUnavailable = "ProtectionUnavailable"
)

// Events of a FencedShardSet.
const (
	// EventShardsGranted: shards without an owner were granted.
	EventShardsGranted = "ShardsGranted"
	// EventShardMoved: a shard moved to a new owner, with a new fence.
	EventShardMoved = "ShardMoved"
	// ReasonShardsOwned / ReasonShardsUnowned: every shard is, or some
	// shards are not, owned by an eligible pod (Ready).
	ReasonShardsOwned   = "ShardsOwned"
	ReasonShardsUnowned = "ShardsUnowned"
)
