package fencing

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

const shardLbl = "fencedlease.io/shard"

var (
	// shard7A: shard "7" held by pod a with fence 42.
	shard7A = Lease{Found: true, Fence: 42, Holder: &Holder{PodName: "a", PodUID: "uid-a"}}
	// noSuchShard: the FencedShardSet exists, without the object's shard.
	noSuchShard = Lease{NoShard: true}
)

// sobj is the metadata of an object protected by shard key of set; fence
// "-" means no annotation.
func sobj(set, key, fence string) *Object {
	o := obj(set, fence)
	o.Labels[shardLbl] = key
	return o
}

// TestProtectedByShard: the shard label beside protected-by makes the
// protector a shard; alone it protects nothing; the stored object's labels
// decide, both of them.
func TestProtectedByShard(t *testing.T) {
	g := NewWithT(t)
	p, ok := ProtectedBy(create(podA, sobj("billing", "7", "1")))
	g.Expect(ok).To(BeTrue())
	g.Expect(p).To(Equal(Protector{Name: "billing", Sharded: true, Shard: "7"}))
	g.Expect(p.String()).To(Equal("billing/7"))
	g.Expect(p.Kind()).To(Equal("FencedShardSet"))

	p, ok = ProtectedBy(update(podA, obj("db", "1"), sobj("db", "7", "1")))
	g.Expect(ok).To(BeTrue())
	g.Expect(p).To(Equal(Protector{Name: "db"}), "the stored object's labels decide: a FencedLease")
	g.Expect(p.Kind()).To(Equal("FencedLease"))

	p, ok = ProtectedBy(update(podA, sobj("billing", "7", "1"), sobj("billing", "8", "1")))
	g.Expect(ok).To(BeTrue())
	g.Expect(p).To(Equal(Protector{Name: "billing", Sharded: true, Shard: "7"}), "the stored object's shard decides")

	p, ok = ProtectedBy(create(podA, sobj("billing", "", "1")))
	g.Expect(ok).To(BeTrue())
	g.Expect(p).To(Equal(Protector{Name: "billing", Sharded: true}), "an empty shard label is still a shard label")

	_, ok = ProtectedBy(create(podA, &Object{Labels: map[string]string{shardLbl: "7"}}))
	g.Expect(ok).To(BeFalse(), "a shard label without protected-by protects nothing")
}

// TestDecideShard: a shard is decided by the rules of a FencedLease, on the
// shard's own grant, and every denial names the shard and its set.
func TestDecideShard(t *testing.T) {
	for _, tc := range []struct {
		name       string
		req        Request
		lease      Lease
		allowed    bool
		reason     Reason
		message    string
		staleWrite bool
	}{
		{name: "owner creates", req: create(podA, sobj("billing", "7", "42")), lease: shard7A, allowed: true, reason: ReasonHolder},
		{name: "owner updates", req: update(podA, sobj("billing", "7", "41"), sobj("billing", "7", "42")), lease: shard7A, allowed: true, reason: ReasonHolder},
		{name: "owner deletes what it wrote with the current fence", req: del(podA, sobj("billing", "7", "42")), lease: shard7A, allowed: true, reason: ReasonHolder},
		{
			// The fence an unprotected object carried orders nothing.
			name: "owner protects an object annotated with a huge fence before", lease: shard7A, allowed: true, reason: ReasonHolder,
			req: update(podA, &Object{Labels: map[string]string{shardLbl: "7"}, Annotations: map[string]string{ann: "9223372036854775807"}}, sobj("billing", "7", "42")),
		},
		{
			name: "another pod with the shard's fence", staleWrite: true, req: update(podB, sobj("billing", "7", "41"), sobj("billing", "7", "42")),
			lease: shard7A, reason: ReasonNotHolder,
			message: `ConfigMap team-a/state: write with fence 42 rejected: pod b is not the holder of shard "7" of FencedShardSet "billing" (holder: pod a, fence 42)`,
		},
		{
			name: "stale owner", staleWrite: true, req: update(podA, sobj("billing", "7", "40"), sobj("billing", "7", "41")), lease: shard7A, reason: ReasonStaleFence,
			message: `ConfigMap team-a/state: write with fence 41 rejected: stale holder: shard "7" of FencedShardSet "billing" is at fence 42`,
		},
		{
			name: "a fence the shard never granted", staleWrite: true, req: create(podA, sobj("billing", "7", "43")), lease: shard7A, reason: ReasonUnknownFence,
			message: `Secret team-a/creds: write with fence 43 rejected: unknown fence: shard "7" of FencedShardSet "billing" is at fence 42`,
		},
		{
			name: "lower than the object's fence", staleWrite: true, req: update(podA, sobj("billing", "7", "43"), sobj("billing", "7", "42")), lease: shard7A,
			reason: ReasonObjectFenceRegression, message: `ConfigMap team-a/state: write with fence 42 rejected: the object was last written with fence 43`,
		},
		{
			name: "no owner", req: create(podA, sobj("billing", "7", "42")), lease: Lease{Found: true, Fence: 42}, reason: ReasonNoHolder,
			message: `Secret team-a/creds: write with fence 42 rejected: shard "7" of FencedShardSet "billing" has no holder (fence 42)`,
		},
		{
			// No Lease yet: found, fence 0, nobody.
			name: "a shard never granted", req: create(podA, sobj("billing", "7", "42")), lease: Lease{Found: true}, reason: ReasonUnknownFence, staleWrite: true,
			message: `Secret team-a/creds: write with fence 42 rejected: unknown fence: shard "7" of FencedShardSet "billing" is at fence 0`,
		},
		{
			name: "no such FencedShardSet", req: create(podA, sobj("billing", "7", "42")), lease: Lease{}, reason: ReasonLeaseNotFound,
			message: `Secret team-a/creds: write with fence 42 rejected: FencedShardSet "billing" not found in namespace team-a, so its shard "7" has no holder`,
		},
		{
			name: "a key that is not a shard of the set", req: create(podA, sobj("billing", "64", "42")), lease: noSuchShard, reason: ReasonUnknownShard,
			message: `Secret team-a/creds: write with fence 42 rejected: FencedShardSet "billing" has no shard "64": label fencedlease.io/shard must name one of its shards (spec.shards or spec.keys)`,
		},
		{
			name: "a delete of an object of a key that is not a shard", req: del(podA, sobj("billing", "64", "42")), lease: noSuchShard, reason: ReasonUnknownShard,
			message: `ConfigMap team-a/state: delete rejected: FencedShardSet "billing" has no shard "64": label fencedlease.io/shard must name one of its shards (spec.shards or spec.keys)`,
		},
		{
			name: "a delete when the set is gone", req: del(podA, sobj("billing", "7", "42")), lease: Lease{}, reason: ReasonLeaseNotFound,
			message: `ConfigMap team-a/state: delete rejected: FencedShardSet "billing" not found in namespace team-a, so its shard "7" has no holder`,
		},
		{
			name: "not a pod", req: update(admin, sobj("billing", "7", "42"), sobj("billing", "7", "42")), lease: shard7A, reason: ReasonWriteNotPod,
			message: `ConfigMap team-a/state: write with fence 42 rejected: user "admin" is not a pod: only the holder pod of shard "7" of FencedShardSet "billing" may write this object (a fence is no proof of identity)`,
		},
		{
			name: "no fence", req: update(podA, sobj("billing", "7", "42"), sobj("billing", "7", "-")), lease: shard7A, reason: ReasonMissingFence,
			message: `ConfigMap team-a/state: write rejected: no fencedlease.io/fence annotation: only the holder of shard "7" of FencedShardSet "billing" may write this object, with its fence`,
		},
		{
			name: "the old owner deletes", staleWrite: true, req: del(podA, sobj("billing", "7", "43")),
			lease: Lease{Found: true, Fence: 43, Holder: &Holder{PodName: "b", PodUID: "uid-b"}}, reason: ReasonNotHolder,
			message: `ConfigMap team-a/state: delete rejected: pod a is not the holder of shard "7" of FencedShardSet "billing" (holder: pod b, fence 43)`,
		},
		{
			name: "owner deletes an object of an older grant", req: del(podA, sobj("billing", "7", "41")), lease: shard7A, reason: ReasonDeleteOlderWrite,
			message: `ConfigMap team-a/state: delete rejected: the object was last written with fence 41, not with the current fence 42 of shard "7" of FencedShardSet "billing": the holder deletes only what carries its current fence (write fencedlease.io/fence=42 on it first, then delete that version)`,
		},
		{
			name: "not a pod deletes", req: del(admin, sobj("billing", "7", "42")), lease: shard7A, reason: ReasonDeleteNotPod,
			message: `ConfigMap team-a/state: delete rejected: a delete carries no fence: only the holder pod of shard "7" of FencedShardSet "billing" may delete this object`,
		},
		{name: "the operator writes without a fence", req: update(Caller{Username: operator}, sobj("billing", "7", "42"), sobj("billing", "7", "-")),
			lease: shard7A, allowed: true, reason: ReasonOperator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.req, tc.lease, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(Equal(tc.message))
			g.Expect(d.StaleWrite).To(Equal(tc.staleWrite))
			g.Expect(d.Lease).To(Equal("billing/"+shardOf(tc.req)), "what metrics and Events name")
		})
	}
}

// shardOf is the shard label of the stored object, or of the new one on
// CREATE.
func shardOf(r Request) string {
	if r.Old != nil {
		return r.Old.Labels[shardLbl]
	}
	return r.New.Labels[shardLbl]
}

// TestShardLabels: on an object that a shard or a FencedLease protects, a
// write by a pod, whatever its grant, may neither add, change nor remove the
// shard label, nor change or remove protected-by. That is settled before any
// grant is read: the same answer whatever grant Decide is handed. The
// operator and break-glass users may.
func TestShardLabels(t *testing.T) {
	grants := []Lease{{}, shard7A, noSuchShard, {Found: true, Fence: 1 << 40, Holder: &Holder{PodName: "b", PodUID: "uid-b"}}}
	unsharded := obj("billing", "42")
	for _, tc := range []struct {
		name    string
		req     Request
		allowed bool
		reason  Reason
		message string
	}{
		{
			name: "owner removes the shard label", req: update(podA, sobj("billing", "7", "42"), unsharded), reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/shard=7 cannot be removed (only the operator or a break-glass user can)`,
		},
		{
			name: "owner moves the object to another shard", req: update(podA, sobj("billing", "7", "42"), sobj("billing", "8", "42")), reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/shard=7 cannot be changed to "8" (only the operator or a break-glass user can)`,
		},
		{
			name: "owner empties the shard label", req: update(podA, sobj("billing", "7", "42"), sobj("billing", "", "42")), reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/shard=7 cannot be changed to "" (only the operator or a break-glass user can)`,
		},
		{
			name: "holder of a FencedLease adds a shard label", req: update(podA, obj("billing", "42"), sobj("billing", "7", "42")), reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/shard=7 cannot be added to an object that FencedLease "billing" protects (only the operator or a break-glass user can)`,
		},
		{
			name: "owner points protected-by elsewhere, keeping the shard", req: update(podA, sobj("billing", "7", "42"), sobj("other", "7", "42")), reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/protected-by=billing cannot be changed to "other" (only the operator or a break-glass user can)`,
		},
		{
			name: "owner removes protected-by, keeping the shard", reason: ReasonLabelChanged,
			req:     update(podA, sobj("billing", "7", "42"), &Object{Labels: map[string]string{shardLbl: "7"}, Annotations: map[string]string{ann: "42"}}),
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/protected-by=billing cannot be removed (only the operator or a break-glass user can)`,
		},
		{
			name: "a status write moves the object to another shard", reason: ReasonLabelChanged,
			req: Request{Operation: Update, Kind: "Widget", Namespace: ns, Name: "w", SubResource: "status", Caller: podA,
				Old: sobj("billing", "7", "42"), New: sobj("billing", "8", "42"), FieldManager: "m;fencedlease.io/fence=42"},
			message: `Widget team-a/w (status): write rejected: label fencedlease.io/shard=7 cannot be changed to "8" (only the operator or a break-glass user can)`,
		},
		{
			name: "a new object with an empty shard label", req: create(podA, sobj("billing", "", "42")), reason: ReasonInvalidLabel,
			message: `Secret team-a/creds: write rejected: label fencedlease.io/shard must name a shard of FencedShardSet "billing"`,
		},
		{
			name: "a new object with an empty protected-by and a shard", req: create(podA, sobj("", "7", "42")), reason: ReasonInvalidLabel,
			message: `Secret team-a/creds: write rejected: label fencedlease.io/protected-by must name a FencedShardSet in the same namespace`,
		},
		{name: "the operator moves the object to another shard", req: update(Caller{Username: operator}, sobj("billing", "7", "42"), sobj("billing", "8", "42")),
			allowed: true, reason: ReasonOperator},
		{name: "a break-glass user removes the shard label", req: update(Caller{Username: "alice"}, sobj("billing", "7", "42"), unsharded),
			allowed: true, reason: ReasonBreakGlass},
		{name: "a shard label on an object nothing protects", req: update(admin, &Object{Labels: map[string]string{shardLbl: "7"}}, &Object{Labels: map[string]string{shardLbl: "8"}}),
			allowed: true, reason: ReasonUnprotected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d, final := Precheck(tc.req, principals)
			g.Expect(final).To(BeTrue(), "settled without a grant")
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(Equal(tc.message))
			for _, l := range grants {
				got := Decide(tc.req, l, principals)
				g.Expect([]any{got.Allowed, got.Reason, got.Message}).To(Equal([]any{d.Allowed, d.Reason, d.Message}))
			}
		})
	}

	// The labels kept: the owner's write goes on to the grant.
	_, final := Precheck(update(podA, sobj("billing", "7", "41"), sobj("billing", "7", "42")), principals)
	NewWithT(t).Expect(final).To(BeFalse())
}

// TestShardOwners: an owner an object of a shard is given must be its
// FencedShardSet (the live one) or an object of a protected resource that
// the same shard of the same set protects; a FencedLease of the set's name
// or an object of another shard will not do, nor the other way round.
func TestShardOwners(t *testing.T) {
	set := OwnerRef{APIVersion: "fencing.fencedlease.io/v1alpha1", Kind: "FencedShardSet", Name: "billing", UID: "set-1"}
	fl := OwnerRef{APIVersion: "fencing.fencedlease.io/v1alpha1", Kind: "FencedLease", Name: "billing", UID: "fl-1"}
	cm := OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: "cm-1"}
	owned := func(o *Object, owners ...OwnerRef) *Object { o.Owners = owners; return o }
	with := func(r Request, found map[types.UID]Owner) Request { r.Owners = found; return r }
	shard7 := Protector{Name: "billing", Sharded: true, Shard: "7"}
	shardMsg := func(o OwnerRef) string {
		return `Secret team-a/creds: owner ` + o.String() + ` is not protected by shard "7" of FencedShardSet "billing": an owner of a protected object must be that FencedShardSet ` +
			`or an object the same shard protects, of a protected resource; otherwise a writer without the current fence could delete the owner, ` +
			`and the garbage collector would then delete this object`
	}
	for _, tc := range []struct {
		name    string
		req     Request
		allowed bool
		message string
	}{
		{name: "owned by its FencedShardSet", allowed: true,
			req: with(create(podA, owned(sobj("billing", "7", "42"), set)), map[types.UID]Owner{"set-1": {Found: true}})},
		{name: "owned by a FencedShardSet of that name but another UID", message: shardMsg(set),
			req: with(create(podA, owned(sobj("billing", "7", "42"), set)), map[types.UID]Owner{"set-1": {}})},
		{name: "owned by a FencedLease of the set's name", message: shardMsg(fl),
			req: with(create(podA, owned(sobj("billing", "7", "42"), fl)), map[types.UID]Owner{"fl-1": {Found: true}})},
		{name: "owned by an object of the same shard", allowed: true,
			req: with(create(podA, owned(sobj("billing", "7", "42"), cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: shard7}})},
		{name: "owned by an object of another shard", message: shardMsg(cm),
			req: with(create(podA, owned(sobj("billing", "7", "42"), cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: Protector{Name: "billing", Sharded: true, Shard: "8"}}})},
		{name: "owned by an object of a FencedLease of the set's name", message: shardMsg(cm),
			req: with(create(podA, owned(sobj("billing", "7", "42"), cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: Protector{Name: "billing"}}})},
		{name: "an object of a FencedLease owned by a FencedShardSet of its name",
			req: with(create(podA, owned(obj("billing", "42"), set)), map[types.UID]Owner{"set-1": {Found: true}}),
			message: `Secret team-a/creds: owner ` + set.String() + ` is not protected by FencedLease "billing": an owner of a protected object must be that FencedLease ` +
				`or an object it protects, of a protected resource; otherwise a writer without the current fence could delete the owner, ` +
				`and the garbage collector would then delete this object`},
		{name: "an object of a FencedLease owned by an object of a shard of a set of its name", message: "",
			req: with(create(podA, owned(obj("billing", "42"), cm)), map[types.UID]Owner{"cm-1": {Listed: true, Found: true, ProtectedBy: shard7}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.req, shard7A, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			if tc.allowed {
				g.Expect(d.Reason).To(Equal(ReasonHolder))
				return
			}
			g.Expect(d.Reason).To(Equal(ReasonOwnerUnprotected))
			if tc.message != "" {
				g.Expect(d.Message).To(Equal(tc.message))
			}
		})
	}
}
