package fencing

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// TestOwners: an owner a protected object is given must be its FencedLease
// (the live one: same UID) or an object of a protected resource that the
// same FencedLease protects, or the write is denied before anything else is
// looked at; owners the object already had are not checked again.
func TestOwners(t *testing.T) {
	fl := OwnerRef{APIVersion: "fencing.fencedlease.io/v1alpha1", Kind: "FencedLease", Name: "db", UID: "fl-1"}
	cm := OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: "cm-1"}
	deploy := OwnerRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep-1"}
	owned := func(lease, fence string, owners ...OwnerRef) *Object {
		o := obj(lease, fence)
		o.Owners = owners
		return o
	}
	with := func(r Request, found map[types.UID]Owner) Request { r.Owners = found; return r }
	ownerMsg := func(o OwnerRef) string {
		return `Secret team-a/creds: owner ` + o.String() + ` is not protected by FencedLease "db": an owner of a protected object must be that FencedLease ` +
			`or an object it protects, of a protected resource; otherwise a writer without the current fence could delete the owner, ` +
			`and the garbage collector would then delete this object`
	}
	for _, tc := range []struct {
		name    string
		req     Request
		allowed bool
		reason  Reason
		message string
	}{
		{name: "owned by its FencedLease", req: with(create(podA, owned("db", "42", fl)), map[types.UID]Owner{"fl-1": {Found: true}}),
			allowed: true, reason: ReasonHolder},
		{name: "owned by a FencedLease of that name but another UID", req: with(create(podA, owned("db", "42", fl)), map[types.UID]Owner{"fl-1": {}}),
			reason: ReasonOwnerUnprotected, message: ownerMsg(fl)},
		{name: "owned by another FencedLease", req: with(create(podA, owned("db", "42", OwnerRef{APIVersion: fl.APIVersion, Kind: "FencedLease", Name: "other", UID: "fl-2"})),
			map[types.UID]Owner{"fl-2": {Found: true}}), reason: ReasonOwnerUnprotected},
		{name: "owned by an object the same FencedLease protects", req: with(create(podA, owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: Protector{Name: "db"}}}),
			allowed: true, reason: ReasonHolder},
		{name: "owned by an unlabelled object", req: with(create(podA, owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true}}),
			reason: ReasonOwnerUnprotected, message: ownerMsg(cm)},
		{name: "owned by an object another FencedLease protects", req: with(create(podA, owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: Protector{Name: "other"}}}),
			reason: ReasonOwnerUnprotected},
		{name: "owned by an object the operator may not read", req: with(create(podA, owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Unreadable: true}}),
			reason: ReasonOwnerUnprotected, message: ownerMsg(cm) + " (the operator may not read ConfigMap objects, so it cannot tell: grant it get on them to allow such owners)"},
		{name: "owned by an object that is gone", req: with(create(podA, owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true}}),
			reason: ReasonOwnerUnprotected},
		{name: "owned by a labelled object of a resource nothing protects", req: with(create(podA, owned("db", "42", deploy)), map[types.UID]Owner{"dep-1": {Found: true, ProtectedBy: Protector{Name: "db"}}}),
			reason: ReasonOwnerUnprotected, message: ownerMsg(deploy)},
		{name: "an owner nothing was read of", req: create(podA, owned("db", "42", cm)), reason: ReasonOwnerUnprotected},
		{name: "an owner added by an update", req: with(update(podA, owned("db", "42"), owned("db", "42", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true}}),
			reason: ReasonOwnerUnprotected},
		{name: "an owner the object already had", req: update(podA, owned("db", "41", cm), owned("db", "42", cm)), allowed: true, reason: ReasonHolder},
		{name: "the label added to an object that has an unprotected owner", req: with(update(podA, &Object{Owners: []OwnerRef{cm}}, owned("db", "42", cm)),
			map[types.UID]Owner{"cm-1": {Listed: true, Found: true}}), reason: ReasonOwnerUnprotected},
		{name: "the operator is not held to it", req: create(Caller{Username: operator}, owned("db", "-", cm)), allowed: true, reason: ReasonOperator},
		{name: "a stale holder's owner is refused first", req: with(create(podB, owned("db", "41", cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true}}),
			reason: ReasonOwnerUnprotected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			if tc.req.Kind == "ConfigMap" {
				tc.req.Kind, tc.req.Name = "Secret", "creds"
			}
			d := Decide(tc.req, heldA, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason), d.Message)
			if tc.message != "" {
				g.Expect(d.Message).To(Equal(tc.message))
			}
		})
	}
}

// TestAddedOwners: the owners a write adds, which alone the webhook reads.
func TestAddedOwners(t *testing.T) {
	a, b := OwnerRef{Kind: "ConfigMap", Name: "a", UID: "a"}, OwnerRef{Kind: "ConfigMap", Name: "b", UID: "b"}
	o := func(labelled bool, owners ...OwnerRef) *Object {
		x := &Object{Labels: map[string]string{}, Owners: owners}
		if labelled {
			x.Labels[lbl] = "db"
		}
		return x
	}
	g := NewWithT(t)
	g.Expect(AddedOwners(create(podA, o(true, a)))).To(Equal([]OwnerRef{a}))
	g.Expect(AddedOwners(update(podA, o(true, a), o(true, a, b)))).To(Equal([]OwnerRef{b}))
	g.Expect(AddedOwners(update(podA, o(true, a), o(true, a)))).To(BeEmpty())
	g.Expect(AddedOwners(update(podA, o(false, a), o(true, a)))).To(Equal([]OwnerRef{a}), "the label added: every owner")
	g.Expect(AddedOwners(del(podA, o(true, a)))).To(BeEmpty())
}
