package fencing

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Operation is the admission operation of a request.
type Operation string

// Operations the fencing webhook is registered for.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// Object is the metadata of the old or the new object of a request. The
// webhook never decodes anything else, so Secret data never reaches it.
type Object struct {
	Labels      map[string]string
	Annotations map[string]string
	// Owners are its ownerReferences.
	Owners []OwnerRef
}

// Request is an admission request for a protected object.
type Request struct {
	Operation Operation
	// Kind, Namespace and Name name the object in messages ("ConfigMap").
	Kind, Namespace, Name string
	// SubResource is the subresource written ("status", "scale"); "" for
	// the object itself. Old and New carry the object's metadata (for a
	// status write of most built-in resources the API server keeps changes
	// of it); the write carries its fence in its field manager
	// (FieldManager), never in the annotation.
	SubResource string
	// FieldManager is the field manager of a subresource write, which ends
	// with fencingv1alpha1.FieldManagerFence and the fence when it carries
	// one.
	FieldManager string
	// Old is the stored object (UPDATE, DELETE); nil on CREATE.
	Old *Object
	// New is the object to be stored (CREATE, UPDATE); nil on DELETE.
	New *Object
	// OwnershipOnly says that an UPDATE changes nothing but the object's
	// ownerReferences and finalizers: what the garbage collector does when it
	// orphans dependents. It is only worked out for the system cleanup
	// principals.
	OwnershipOnly bool
	// Owners is what the webhook found of the owners the request adds
	// (AddedOwners), by UID; an owner missing from it is treated as not
	// found.
	Owners map[types.UID]Owner
	// Caller is who sends the request.
	Caller Caller
	// DryRun says that the write is not persisted (kubectl --dry-run=server,
	// kubectl diff). It gets the same answer as the real write, but leaves no
	// trace: no Event, no audit record of a write that never happened.
	DryRun bool
}

// Caller is the authenticated user of a request.
type Caller struct {
	Username string
	Groups   []string
	// PodName and PodUID are set when the caller authenticates with a
	// service-account token bound to a pod: the API server copies them from
	// the token into the user info (authentication.kubernetes.io/pod-name
	// and pod-uid).
	PodName string
	PodUID  types.UID
}

// IsPod reports whether the caller is a pod with a bound token.
func (c Caller) IsPod() bool { return c.PodUID != "" }

// Lease is the grant of the FencedLease, or of the shard of a
// FencedShardSet, that protects an object, as the API server holds it when
// the request is decided.
type Lease struct {
	// Found is false when no FencedLease (or FencedShardSet) of that name
	// exists in the namespace, or the set has no shard of the object's key
	// (NoShard).
	Found bool
	// NoShard, with Found false, says that the FencedShardSet exists but
	// the object's shard key is not one of its shards.
	NoShard bool
	// Fence is the fence of the last committed grant.
	Fence int64
	// Holder is the pod of that grant while it is held: nil when nobody holds
	// the lease or the shard (no grant yet, or it was revoked, released,
	// superseded by a grant not committed yet, or its Lease is gone).
	Holder *Holder
}

// Holder is the pod of the current grant.
type Holder struct {
	PodName string
	PodUID  types.UID
}

// Principals are the callers that write without a fence.
type Principals struct {
	// OperatorUsers are the user names of the operator itself.
	OperatorUsers []string
	// BreakGlassUsers and BreakGlassGroups repair protected objects by hand;
	// their writes are audited.
	BreakGlassUsers  []string
	BreakGlassGroups []string
}

// systemCleanupUsers may DELETE protected objects, and UPDATE only their
// ownerReferences and finalizers, so that namespace deletion and garbage
// collection (orphaning too) complete: the namespace controller and the
// garbage collector, with their own service accounts
// (--use-service-account-credentials) or as kube-controller-manager itself.
var systemCleanupUsers = []string{
	"system:serviceaccount:kube-system:namespace-controller",
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:kube-controller-manager",
}

// IsSystemCleanup says whether the caller is one of the system controllers
// that clean up after deletions.
func (c Caller) IsSystemCleanup() bool { return slices.Contains(systemCleanupUsers, c.Username) }

func (p Principals) isOperator(c Caller) bool {
	return slices.Contains(p.OperatorUsers, c.Username)
}

func (p Principals) isBreakGlass(c Caller) bool {
	if slices.Contains(p.BreakGlassUsers, c.Username) {
		return true
	}
	for _, g := range c.Groups {
		if slices.Contains(p.BreakGlassGroups, g) {
			return true
		}
	}
	return false
}

// Exempt reports whether the caller writes protected objects without the
// holder's checks: the operator, a break-glass user, or a system cleanup
// controller (whose writes Precheck limits to deletions and ownership).
func (p Principals) Exempt(c Caller) bool {
	return p.isOperator(c) || p.isBreakGlass(c) || c.IsSystemCleanup()
}
