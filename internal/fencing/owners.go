package fencing

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// OwnerRef is an ownerReference of an object, as the rules need it.
type OwnerRef struct {
	APIVersion, Kind, Name string
	UID                    types.UID
}

func (o OwnerRef) String() string { return fmt.Sprintf("%s %s (uid %s)", o.Kind, o.Name, o.UID) }

// IsFencedLease reports whether the reference names a FencedLease.
func (o OwnerRef) IsFencedLease() bool { return o.isOurs("FencedLease") }

// IsFencedShardSet reports whether the reference names a FencedShardSet.
func (o OwnerRef) IsFencedShardSet() bool { return o.isOurs("FencedShardSet") }

// isOurs reports whether the reference names an object of the operator's
// API group of the kind, in any version.
func (o OwnerRef) isOurs(kind string) bool {
	return o.Kind == kind && strings.HasPrefix(o.APIVersion, fencingv1alpha1.GroupVersion.Group+"/")
}

// Owner is what the webhook found of an owner an object is given: the
// object the reference names, as the API server holds it now.
type Owner struct {
	// Listed says that the owner's resource is one the webhook protects
	// (an owner of another resource cannot be protected: nothing checks
	// its writes or its deletion).
	Listed bool
	// Found says that an object of the reference's name and UID exists.
	Found bool
	// ProtectedBy is what its labels say protects it (the zero Protector
	// when it has no protected-by label).
	ProtectedBy Protector
	// Unreadable says that the operator may not read it (RBAC): it cannot
	// be shown to be protected.
	Unreadable bool
}

// AddedOwners are the ownerReferences a CREATE or UPDATE gives a protected
// object: on CREATE, or when the UPDATE adds the protected-by label, every
// reference of the new object; otherwise those the old object did not have
// (by UID). The webhook reads only these owners, and only for a request
// Precheck does not settle without them.
func AddedOwners(r Request) []OwnerRef {
	if r.New == nil || len(r.New.Owners) == 0 || r.Operation == Delete {
		return nil
	}
	if r.Old == nil {
		return r.New.Owners
	}
	if _, had := r.Old.Labels[fencingv1alpha1.LabelProtectedBy]; !had {
		return r.New.Owners
	}
	var added []OwnerRef
	for _, o := range r.New.Owners {
		if !hasOwner(r.Old.Owners, o.UID) {
			added = append(added, o)
		}
	}
	return added
}

func hasOwner(refs []OwnerRef, uid types.UID) bool {
	for _, o := range refs {
		if o.UID == uid {
			return true
		}
	}
	return false
}

// checkOwners applies the owner rule: an owner a protected object is given
// must be what grants its protector (the FencedLease that protects it, or
// the FencedShardSet of its shard), or an object of a protected resource
// that the same protector protects (the same FencedLease, or the same shard
// of the same set). An owner of any other kind could be deleted without a
// fence, by a holder of an older grant, of another shard, or by anyone, and
// the garbage collector would then delete the protected object (its deletes
// are admitted as system cleanup). It returns the first owner that breaks
// the rule.
func checkOwners(r Request, p Protector) (OwnerRef, Owner, bool) {
	for _, o := range AddedOwners(r) {
		got := r.Owners[o.UID]
		switch {
		case p.grants(o) && got.Found:
		case got.Listed && got.Found && got.ProtectedBy == p:
		default:
			return o, got, false
		}
	}
	return OwnerRef{}, Owner{}, true
}
