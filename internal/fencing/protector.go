package fencing

import (
	"fmt"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Protector is what protects an object, as its labels say: a FencedLease,
// or a shard of a FencedShardSet. The label protected-by names the
// FencedLease or the set; the shard label beside it names the shard's key,
// and its presence alone says that the protector is a set's shard.
type Protector struct {
	// Name is the value of the protected-by label: the name of the
	// FencedLease, or of the FencedShardSet.
	Name string
	// Sharded says that the object carries the shard label: the protector
	// is the shard Shard of the FencedShardSet Name.
	Sharded bool
	// Shard is the shard's key, the value of the shard label.
	Shard string
}

// ProtectorOf reads the protector from an object's labels; ok is false when
// they have no protected-by label (a shard label alone protects nothing).
func ProtectorOf(labels map[string]string) (p Protector, ok bool) {
	name, ok := labels[fencingv1alpha1.LabelProtectedBy]
	if !ok {
		return Protector{}, false
	}
	key, sharded := labels[fencingv1alpha1.LabelShard]
	return Protector{Name: name, Sharded: sharded, Shard: key}, true
}

// ProtectedBy returns what protects the object of the request: the labels
// of the stored object, or of the new object when the stored one has no
// protected-by label (CREATE, or an UPDATE that adds protection). ok is
// false when neither carries it.
func ProtectedBy(r Request) (p Protector, ok bool) {
	for _, o := range []*Object{r.Old, r.New} {
		if o == nil {
			continue
		}
		if p, ok := ProtectorOf(o.Labels); ok {
			return p, true
		}
	}
	return Protector{}, false
}

// String names the protector in logs, metrics and Decision.Lease: the
// FencedLease's name ("db"), or "<set>/<key>" for a shard ("billing/7").
func (p Protector) String() string {
	if p.Sharded {
		return p.Name + "/" + p.Shard
	}
	return p.Name
}

// Kind is the kind of the object that grants the protector:
// FencedLease or FencedShardSet.
func (p Protector) Kind() string {
	if p.Sharded {
		return "FencedShardSet"
	}
	return "FencedLease"
}

// describe names the protector in messages: FencedLease "db", or
// shard "7" of FencedShardSet "billing".
func (p Protector) describe() string {
	if p.Sharded {
		return fmt.Sprintf("shard %q of FencedShardSet %q", p.Shard, p.Name)
	}
	return fmt.Sprintf("FencedLease %q", p.Name)
}

// grants says whether the ownerReference names the object that grants the
// protector: its FencedLease, or the FencedShardSet of its shard.
func (p Protector) grants(o OwnerRef) bool {
	if p.Sharded {
		return o.IsFencedShardSet() && o.Name == p.Name
	}
	return o.IsFencedLease() && o.Name == p.Name
}

// checkLabels applies the label rule: a write may not take the protection
// of a protected object away or give it to another protector. The new
// object keeps the protected-by label of the stored one, and its shard
// label as it was (present or absent, and with the same value): adding a
// shard label to an object a FencedLease protects would hand it to a
// FencedShardSet, removing one would hand it to a FencedLease of the
// set's name, changing one to another shard. It returns the message of the
// denial; ok when the rule holds (or the stored object is not protected).
func checkLabels(r Request, m messages) (msg string, ok bool) {
	if r.Old == nil || r.New == nil {
		return "", true
	}
	was, had := ProtectorOf(r.Old.Labels)
	if !had {
		return "", true
	}
	is, has := ProtectorOf(r.New.Labels)
	if has && is == was {
		return "", true
	}
	return m.labelChanged(was, is, has), false
}

// labelChanged says which label a write changes on an object protected by
// was: the protected-by label first, then the shard label.
func (m messages) labelChanged(was, is Protector, has bool) string {
	label, from, change := fencingv1alpha1.LabelProtectedBy, was.Name, "removed"
	switch {
	case !has:
	case is.Name != was.Name:
		change = fmt.Sprintf("changed to %q", is.Name)
	case !was.Sharded:
		label, from = fencingv1alpha1.LabelShard, is.Shard
		change = fmt.Sprintf("added to an object that %s protects", was.describe())
	case !is.Sharded:
		label, from = fencingv1alpha1.LabelShard, was.Shard
	default:
		label, from = fencingv1alpha1.LabelShard, was.Shard
		change = fmt.Sprintf("changed to %q", is.Shard)
	}
	return fmt.Sprintf("%s: label %s=%s cannot be %s (only the operator or a break-glass user can)", m.rejected(), label, from, change)
}
