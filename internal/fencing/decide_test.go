package fencing

import (
	"testing"

	. "github.com/onsi/gomega"
)

const (
	ns       = "team-a"
	lbl      = "fencedlease.io/protected-by"
	ann      = "fencedlease.io/fence"
	operator = "system:serviceaccount:fencedlease-system:fencedlease-controller-manager"
)

var (
	principals = Principals{
		OperatorUsers:    []string{operator},
		BreakGlassUsers:  []string{"alice"},
		BreakGlassGroups: []string{"sre:break-glass"},
	}
	podA   = Caller{Username: "system:serviceaccount:team-a:default", PodName: "a", PodUID: "uid-a"}
	podB   = Caller{Username: "system:serviceaccount:team-a:default", PodName: "b", PodUID: "uid-b"}
	admin  = Caller{Username: "admin", Groups: []string{"system:masters"}}
	heldA  = Lease{Found: true, Fence: 42, Holder: &Holder{PodName: "a", PodUID: "uid-a"}}
	noneAt = Lease{Found: true, Fence: 42}
)

// obj is a protected object's metadata; fence "" means no annotation.
func obj(lease, fence string) *Object {
	o := &Object{Labels: map[string]string{lbl: lease}, Annotations: map[string]string{}}
	if fence != "-" {
		o.Annotations[ann] = fence
	}
	return o
}

func update(c Caller, old, new *Object) Request {
	return Request{Operation: Update, Kind: "ConfigMap", Namespace: ns, Name: "state", Old: old, New: new, Caller: c}
}

func create(c Caller, new *Object) Request {
	return Request{Operation: Create, Kind: "Secret", Namespace: ns, Name: "creds", New: new, Caller: c}
}

func del(c Caller, old *Object) Request {
	return Request{Operation: Delete, Kind: "ConfigMap", Namespace: ns, Name: "state", Old: old, Caller: c}
}

func TestDecide(t *testing.T) {
	unlabelled := &Object{Labels: map[string]string{"app": "x"}}
	relabelled := obj("other", "42")
	unprotectedNew := &Object{Labels: map[string]string{}, Annotations: map[string]string{ann: "42"}}
	for _, tc := range []struct {
		name    string
		req     Request
		lease   Lease
		allowed bool
		reason  Reason
		message string
		audit   bool
		// staleWrite: a StaleWriteRejected Event is recorded.
		staleWrite bool
	}{
		// Rule 1: principals.
		{name: "unlabelled object", req: update(admin, unlabelled, unlabelled), allowed: true, reason: ReasonUnprotected},
		{name: "operator without fence", req: update(Caller{Username: operator}, obj("db", "-"), obj("db", "-")), allowed: true, reason: ReasonOperator},
		{name: "operator removes the label", req: update(Caller{Username: operator}, obj("db", "42"), unprotectedNew), allowed: true, reason: ReasonOperator},
		{name: "break-glass user", req: update(Caller{Username: "alice"}, obj("db", "42"), obj("db", "-")), allowed: true, reason: ReasonBreakGlass, audit: true},
		{name: "break-glass group", req: del(Caller{Username: "carol", Groups: []string{"dev", "sre:break-glass"}}, obj("db", "42")), allowed: true, reason: ReasonBreakGlass, audit: true},
		{name: "namespace controller deletes", req: del(Caller{Username: "system:serviceaccount:kube-system:namespace-controller"}, obj("db", "42")), allowed: true, reason: ReasonSystemCleanup},
		{name: "garbage collector deletes", req: del(Caller{Username: "system:serviceaccount:kube-system:generic-garbage-collector"}, obj("db", "42")), allowed: true, reason: ReasonSystemCleanup},
		{name: "kube-controller-manager deletes", req: del(Caller{Username: "system:kube-controller-manager"}, obj("db", "42")), allowed: true, reason: ReasonSystemCleanup},
		{name: "garbage collector orphans (ownerReferences only)", req: func() Request {
			r := update(Caller{Username: "system:serviceaccount:kube-system:generic-garbage-collector"}, obj("db", "42"), obj("db", "42"))
			r.OwnershipOnly = true
			return r
		}(), lease: heldA, allowed: true, reason: ReasonSystemCleanup},
		{
			name: "garbage collector changing more than ownership is an ordinary writer", lease: heldA, reason: ReasonWriteNotPod,
			req:     update(Caller{Username: "system:serviceaccount:kube-system:generic-garbage-collector"}, obj("db", "42"), obj("db", "42")),
			message: `ConfigMap team-a/state: write with fence 42 rejected: user "system:serviceaccount:kube-system:generic-garbage-collector" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{name: "ownership-only update by someone else is an ordinary write", req: func() Request {
			r := update(admin, obj("db", "42"), obj("db", "42"))
			r.OwnershipOnly = true
			return r
		}(), lease: heldA, reason: ReasonWriteNotPod,
			message: `ConfigMap team-a/state: write with fence 42 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`},
		{
			name: "namespace controller may not update", req: update(Caller{Username: "system:serviceaccount:kube-system:namespace-controller"}, obj("db", "42"), obj("db", "-")),
			lease: heldA, reason: ReasonMissingFence,
			message: `ConfigMap team-a/state: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`,
		},
		{
			name: "admin without fence", req: create(admin, obj("db", "-")), lease: heldA, reason: ReasonMissingFence,
			message: `Secret team-a/creds: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`,
		},

		// Rule 2: writes with a fence.
		{name: "holder creates", req: create(podA, obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{name: "holder updates", req: update(podA, obj("db", "41"), obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{name: "holder rewrites with the same fence", req: update(podA, obj("db", "42"), obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{
			// A patch carries the stored fence over: the fence proves nothing
			// about who writes, only a pod's bound identity does.
			name: "caller that is not a pod with the current fence", req: update(admin, obj("db", "42"), obj("db", "42")), lease: heldA, reason: ReasonWriteNotPod,
			message: `ConfigMap team-a/state: write with fence 42 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{
			// Decided before any read: the FencedLease is not even looked at
			// (here it says 42), so a low fence from a person or a job never
			// counts as a stale holder.
			name: "caller that is not a pod with a stale fence", req: update(admin, obj("db", "41"), obj("db", "41")), lease: heldA, reason: ReasonWriteNotPod,
			message: `ConfigMap team-a/state: write with fence 41 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{
			name: "caller that is not a pod with a fence higher than the current one", req: update(admin, obj("db", "42"), obj("db", "50")), lease: heldA, reason: ReasonWriteNotPod,
			message: `ConfigMap team-a/state: write with fence 50 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{
			name: "caller that is not a pod, FencedLease not found", req: create(admin, obj("db", "42")), lease: Lease{}, reason: ReasonWriteNotPod,
			message: `Secret team-a/creds: write with fence 42 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{name: "stored fence not a token", req: update(podA, obj("db", "garbage"), obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{
			name: "stale holder", staleWrite: true, req: update(podA, obj("db", "40"), obj("db", "41")), lease: heldA, reason: ReasonStaleFence,
			message: `ConfigMap team-a/state: write with fence 41 rejected: stale holder: FencedLease "db" is at fence 42`,
		},
		{
			name: "stale holder creates", staleWrite: true, req: create(podB, obj("db", "41")), lease: heldA, reason: ReasonStaleFence,
			message: `Secret team-a/creds: write with fence 41 rejected: stale holder: FencedLease "db" is at fence 42`,
		},
		{
			name: "lower than the object's fence", staleWrite: true, req: update(podA, obj("db", "43"), obj("db", "42")), lease: heldA, reason: ReasonObjectFenceRegression,
			message: `ConfigMap team-a/state: write with fence 42 rejected: the object was last written with fence 43`,
		},
		{
			name: "fence annotation removed", req: update(podA, obj("db", "42"), obj("db", "-")), lease: heldA, reason: ReasonMissingFence,
			message: `ConfigMap team-a/state: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`,
		},
		{
			name: "stale holder on an object a newer holder wrote", staleWrite: true, req: update(podA, obj("db", "42"), obj("db", "41")), lease: heldA, reason: ReasonStaleFence,
			message: `ConfigMap team-a/state: write with fence 41 rejected: stale holder: FencedLease "db" is at fence 42`,
		},
		{
			name: "lower than the object's fence, FencedLease not found", staleWrite: true, req: update(podA, obj("db", "43"), obj("db", "42")), lease: Lease{}, reason: ReasonObjectFenceRegression,
			message: `ConfigMap team-a/state: write with fence 42 rejected: the object was last written with fence 43`,
		},
		{
			name: "higher than current: unknown", staleWrite: true, req: update(podB, obj("db", "42"), obj("db", "50")), lease: heldA, reason: ReasonUnknownFence,
			message: `ConfigMap team-a/state: write with fence 50 rejected: unknown fence: FencedLease "db" is at fence 42`,
		},
		{
			name: "not found", req: create(podA, obj("db", "42")), lease: Lease{}, reason: ReasonLeaseNotFound,
			message: `Secret team-a/creds: write with fence 42 rejected: FencedLease "db" not found in namespace team-a`,
		},
		{
			name: "no holder", req: create(podA, obj("db", "42")), lease: noneAt, reason: ReasonNoHolder,
			message: `Secret team-a/creds: write with fence 42 rejected: FencedLease "db" has no holder (fence 42)`,
		},
		{
			name: "no holder, caller not a pod", req: create(admin, obj("db", "42")), lease: noneAt, reason: ReasonWriteNotPod,
			message: `Secret team-a/creds: write with fence 42 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{
			name: "standby with the holder's fence", staleWrite: true, req: update(podB, obj("db", "41"), obj("db", "42")), lease: heldA, reason: ReasonNotHolder,
			message: `ConfigMap team-a/state: write with fence 42 rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence 42)`,
		},

		// Rule 3 and the label.
		{name: "holder deletes", req: del(podA, obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{
			name: "standby deletes", staleWrite: true, req: del(podB, obj("db", "42")), lease: heldA, reason: ReasonNotHolder,
			message: `ConfigMap team-a/state: delete rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence 42)`,
		},
		{
			// The object carries a fence the FencedLease never granted: a
			// holder of an older grant must not delete it.
			name: "holder deletes an object with a newer fence", staleWrite: true, req: del(podA, obj("db", "43")), lease: heldA, reason: ReasonUnknownFence,
			message: `ConfigMap team-a/state: delete rejected: the object carries fence 43, which FencedLease "db" never granted (it is at fence 42)`,
		},
		{
			// The pod's identity cannot tell its grant 42 from an older
			// grant of its own whose process still acts: the object must
			// carry the current fence.
			name: "holder deletes an object with an older fence", req: del(podA, obj("db", "41")), lease: heldA, reason: ReasonDeleteOlderWrite,
			message: `ConfigMap team-a/state: delete rejected: the object was last written with fence 41, not with the current fence 42 of FencedLease "db": the holder deletes only what carries its current fence (write fencedlease.io/fence=42 on it first, then delete that version)`,
		},
		{
			name: "holder deletes an object without a fence", req: del(podA, obj("db", "-")), lease: heldA, reason: ReasonDeleteOlderWrite,
			message: `ConfigMap team-a/state: delete rejected: the object carries no fence, not with the current fence 42 of FencedLease "db": the holder deletes only what carries its current fence (write fencedlease.io/fence=42 on it first, then delete that version)`,
		},
		{
			name: "stale holder deletes the new holder's object", staleWrite: true, req: del(podA, obj("db", "43")),
			lease: Lease{Found: true, Fence: 43, Holder: &Holder{PodName: "b", PodUID: "uid-b"}}, reason: ReasonNotHolder,
			message: `ConfigMap team-a/state: delete rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence 43)`,
		},
		{
			name: "pod deletes, no holder", req: del(podA, obj("db", "42")), lease: noneAt, reason: ReasonNoHolder,
			message: `ConfigMap team-a/state: delete rejected: FencedLease "db" has no holder (fence 42)`,
		},
		{
			name: "pod deletes, no FencedLease", req: del(podA, obj("db", "42")), lease: Lease{}, reason: ReasonLeaseNotFound,
			message: `ConfigMap team-a/state: delete rejected: FencedLease "db" not found in namespace team-a`,
		},
		{
			name: "admin deletes", req: del(admin, obj("db", "42")), lease: heldA, reason: ReasonDeleteNotPod,
			message: `ConfigMap team-a/state: delete rejected: a delete carries no fence: only the holder pod of FencedLease "db" may delete this object`,
		},
		{
			name: "holder removes the label", req: update(podA, obj("db", "42"), unprotectedNew), lease: heldA, reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`,
		},
		{
			name: "holder points the label elsewhere", req: update(podA, obj("db", "42"), relabelled), lease: heldA, reason: ReasonLabelChanged,
			message: `ConfigMap team-a/state: write rejected: label fencedlease.io/protected-by=db cannot be changed to "other" (only the operator or a break-glass user can)`,
		},
		{name: "holder protects an unprotected object", req: update(podA, unlabelled, obj("db", "42")), lease: heldA, allowed: true, reason: ReasonHolder},
		{
			// Anyone may annotate an object that is not protected: its fence
			// orders nothing, or a huge one would keep the holder from ever
			// protecting it.
			name: "holder protects an object annotated with a huge fence before", lease: heldA, allowed: true, reason: ReasonHolder,
			req: update(podA, &Object{Annotations: map[string]string{ann: "9223372036854775807"}}, obj("db", "42")),
		},
		{
			name: "empty label", req: create(podA, obj("", "42")), lease: heldA, reason: ReasonInvalidLabel,
			message: `Secret team-a/creds: write rejected: label fencedlease.io/protected-by must name a FencedLease in the same namespace`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.req, tc.lease, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(Equal(tc.message))
			g.Expect(d.Audit).To(Equal(tc.audit))
			g.Expect(d.StaleWrite).To(Equal(tc.staleWrite))

			// A dry run gets the same answer and leaves no trace.
			dry := tc.req
			dry.DryRun = true
			dd := Decide(dry, tc.lease, principals)
			g.Expect([]any{dd.Allowed, dd.Reason, dd.Message}).To(Equal([]any{d.Allowed, d.Reason, d.Message}))
			g.Expect(dd.Audit).To(BeFalse())
			g.Expect(dd.StaleWrite).To(BeFalse())
		})
	}
}

// TestDecideMalformedFence checks every non-canonical token, with the
// message of fence.ParseFence.
func TestDecideMalformedFence(t *testing.T) {
	for _, tc := range []struct{ fence, message string }{
		{"", `invalid fence "": empty`},
		{"abc", `invalid fence "abc": not a decimal integer`},
		{"-1", `invalid fence "-1": sign not allowed`},
		{"+1", `invalid fence "+1": sign not allowed`},
		{"0", `invalid fence "0": must be positive`},
		{"007", `invalid fence "007": leading zero`},
		{" 42", `invalid fence " 42": whitespace not allowed`},
		{"42\n", `invalid fence "42\n": whitespace not allowed`},
		{"4.2e1", `invalid fence "4.2e1": not a decimal integer`},
		{"9223372036854775808", `invalid fence "9223372036854775808": out of range for int64`},
		{"٤٢", `invalid fence "٤٢": non-ASCII character`},
	} {
		t.Run(tc.fence, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(update(podA, obj("db", "41"), obj("db", tc.fence)), heldA, principals)
			g.Expect(d.Allowed).To(BeFalse())
			g.Expect(d.Reason).To(Equal(ReasonMalformedFence))
			g.Expect(d.Message).To(Equal("ConfigMap team-a/state: write rejected: annotation fencedlease.io/fence: " + tc.message))
		})
	}
}

func TestProtectedBy(t *testing.T) {
	g := NewWithT(t)
	p, ok := ProtectedBy(update(podA, obj("db", "1"), obj("other", "1")))
	g.Expect(p).To(Equal(Protector{Name: "db"}), "the stored object's label decides")
	g.Expect(ok).To(BeTrue())
	p, ok = ProtectedBy(update(podA, &Object{}, obj("db", "1")))
	g.Expect(p).To(Equal(Protector{Name: "db"}))
	g.Expect(ok).To(BeTrue())
	_, ok = ProtectedBy(del(podA, &Object{}))
	g.Expect(ok).To(BeFalse())
}

// TestPrecheck: everything but a pod's write with a well-formed fence, and a
// pod's delete, is settled without the FencedLease, and Decide gives the
// same answer whatever FencedLease it is handed.
func TestPrecheck(t *testing.T) {
	leases := []Lease{{}, heldA, noneAt, {Found: true, Fence: 1 << 40, Holder: &Holder{PodName: "b", PodUID: "uid-b"}}}
	for _, tc := range []struct {
		name   string
		req    Request
		final  bool
		reason Reason
	}{
		{"unprotected", update(admin, &Object{}, &Object{}), true, ReasonUnprotected},
		{"operator", update(Caller{Username: operator}, obj("db", "-"), obj("db", "-")), true, ReasonOperator},
		{"break-glass", del(Caller{Username: "alice"}, obj("db", "1")), true, ReasonBreakGlass},
		{"not a pod, any fence", update(admin, obj("db", "1"), obj("db", "99")), true, ReasonWriteNotPod},
		{"not a pod deletes", del(admin, obj("db", "1")), true, ReasonDeleteNotPod},
		{"pod without fence", update(podB, obj("db", "1"), obj("db", "-")), true, ReasonMissingFence},
		{"pod with malformed fence", update(podB, obj("db", "1"), obj("db", "x")), true, ReasonMalformedFence},
		{"pod changes the label", update(podA, obj("db", "1"), obj("other", "42")), true, ReasonLabelChanged},
		{"pod writes with a fence", update(podA, obj("db", "1"), obj("db", "42")), false, ""},
		{"pod deletes", del(podA, obj("db", "1")), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d, final := Precheck(tc.req, principals)
			g.Expect(final).To(Equal(tc.final))
			if !final {
				return
			}
			g.Expect(d.Reason).To(Equal(tc.reason))
			for _, l := range leases {
				got := Decide(tc.req, l, principals)
				g.Expect([]any{got.Allowed, got.Reason, got.Message}).To(Equal([]any{d.Allowed, d.Reason, d.Message}))
				g.Expect(got.StaleWrite).To(BeFalse(), "only pods are stale holders")
			}
		})
	}
}

// status is a write to the status subresource of a protected Widget: its
// metadata is the object's, old and new, and the fence, if any, is in the
// field manager.
func status(c Caller, stored, fieldManager string) Request {
	return Request{Operation: Update, Kind: "Widget", Namespace: ns, Name: "w", SubResource: "status",
		Old: obj("db", stored), New: obj("db", stored), Caller: c, FieldManager: fieldManager}
}

func TestDecideSubResource(t *testing.T) {
	for _, tc := range []struct {
		name       string
		req        Request
		lease      Lease
		allowed    bool
		reason     Reason
		message    string
		staleWrite bool
	}{
		{
			name: "holder without a fence", req: status(podA, "41", "widget-controller"), lease: heldA, reason: ReasonMissingFence,
			message: `Widget team-a/w (status): write rejected: no fencedlease.io/fence annotation: a status write cannot carry one on the object: it carries its fence in its field manager (<manager>;fencedlease.io/fence=<N>); only the holder of FencedLease "db" may write this object, with its fence`,
		},
		{name: "holder with its fence", req: status(podA, "41", "widget-controller;fencedlease.io/fence=42"), lease: heldA, allowed: true, reason: ReasonHolder},
		{name: "a field manager that is only the fence", req: status(podA, "42", ";fencedlease.io/fence=42"), lease: heldA, allowed: true, reason: ReasonHolder},
		{
			name: "standby with the current fence", staleWrite: true, req: status(podB, "42", "widget-controller;fencedlease.io/fence=42"), lease: heldA, reason: ReasonNotHolder,
			message: `Widget team-a/w (status): write with fence 42 rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence 42)`,
		},
		{
			// A process of an older grant of the same pod: by identity the
			// holder, told apart by its fence alone.
			name: "the holder pod under an older grant", staleWrite: true, req: status(podA, "41", "widget-controller;fencedlease.io/fence=40"), lease: heldA, reason: ReasonStaleFence,
			message: `Widget team-a/w (status): write with fence 40 rejected: stale holder: FencedLease "db" is at fence 42`,
		},
		{
			name: "stale holder with its old fence", staleWrite: true, req: status(podA, "41", "widget-controller;fencedlease.io/fence=41"), lease: heldA, reason: ReasonStaleFence,
			message: `Widget team-a/w (status): write with fence 41 rejected: stale holder: FencedLease "db" is at fence 42`,
		},
		{
			name: "holder below the object's fence", staleWrite: true, req: status(podA, "43", "widget-controller;fencedlease.io/fence=42"),
			lease: heldA, reason: ReasonObjectFenceRegression,
			message: `Widget team-a/w (status): write with fence 42 rejected: the object was last written with fence 43`,
		},
		{
			name: "a malformed fence", req: status(podA, "41", "widget-controller;fencedlease.io/fence=042"), lease: heldA, reason: ReasonMalformedFence,
			message: `Widget team-a/w (status): write rejected: the fence in the field manager (;fencedlease.io/fence=<N>): invalid fence "042": leading zero`,
		},
		{
			name: "not a pod", req: status(admin, "41", "kubectl;fencedlease.io/fence=42"), lease: heldA, reason: ReasonWriteNotPod,
			message: `Widget team-a/w (status): write with fence 42 rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
		},
		{
			name: "no holder", req: status(podA, "41", "widget-controller;fencedlease.io/fence=42"), lease: noneAt, reason: ReasonNoHolder,
			message: `Widget team-a/w (status): write with fence 42 rejected: FencedLease "db" has no holder (fence 42)`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.req, tc.lease, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(Equal(tc.message))
			g.Expect(d.StaleWrite).To(Equal(tc.staleWrite))
		})
	}
}

// TestDecideSubResourceMetadata: a status write that changes the object's
// metadata (the API server keeps such changes on most built-in resources'
// status) is held to the label rule and may not move the stored fence, by
// whomever, with whatever fence; the operator and a break-glass user may.
func TestDecideSubResourceMetadata(t *testing.T) {
	write := func(c Caller, old, new *Object, fieldManager string) Request {
		return Request{Operation: Update, Kind: "StatefulSet", Namespace: ns, Name: "w", SubResource: "status",
			Old: old, New: new, Caller: c, FieldManager: fieldManager}
	}
	unlabelled := &Object{Annotations: map[string]string{"fencedlease.io/fence": "42"}}
	for _, tc := range []struct {
		name    string
		req     Request
		allowed bool
		reason  Reason
		message string
	}{
		{
			name: "stale holder removes the label", req: write(podA, obj("db", "41"), &Object{Annotations: map[string]string{"fencedlease.io/fence": "41"}}, "m;fencedlease.io/fence=41"),
			reason:  ReasonLabelChanged,
			message: `StatefulSet team-a/w (status): write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`,
		},
		{
			name: "holder identity without a fence removes the label", req: write(podA, obj("db", "42"), unlabelled, "m"),
			reason:  ReasonLabelChanged,
			message: `StatefulSet team-a/w (status): write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`,
		},
		{
			name: "the holder changes the label", req: write(podA, obj("db", "42"), obj("other", "42"), "m;fencedlease.io/fence=42"),
			reason:  ReasonLabelChanged,
			message: `StatefulSet team-a/w (status): write rejected: label fencedlease.io/protected-by=db cannot be changed to "other" (only the operator or a break-glass user can)`,
		},
		{
			name: "standby sets the fence to the largest int64", req: write(podB, obj("db", "42"), obj("db", "9223372036854775807"), "m"),
			reason:  ReasonSubresourceMetadata,
			message: `StatefulSet team-a/w (status): write rejected: a status write cannot change annotation fencedlease.io/fence (from "42" to "9223372036854775807"): only a write of the object itself moves the stored fence`,
		},
		{
			name: "the holder moves the fence with its own", req: write(podA, obj("db", "41"), obj("db", "42"), "m;fencedlease.io/fence=42"),
			reason:  ReasonSubresourceMetadata,
			message: `StatefulSet team-a/w (status): write rejected: a status write cannot change annotation fencedlease.io/fence (from "41" to "42"): only a write of the object itself moves the stored fence`,
		},
		{
			name: "the holder removes the fence", req: write(podA, obj("db", "42"), &Object{Labels: map[string]string{"fencedlease.io/protected-by": "db"}}, "m;fencedlease.io/fence=42"),
			reason:  ReasonSubresourceMetadata,
			message: `StatefulSet team-a/w (status): write rejected: a status write cannot change annotation fencedlease.io/fence (from "42" to absent): only a write of the object itself moves the stored fence`,
		},
		{name: "the holder changes another annotation", allowed: true, reason: ReasonHolder, req: write(podA, obj("db", "42"),
			&Object{Labels: map[string]string{"fencedlease.io/protected-by": "db"}, Annotations: map[string]string{"fencedlease.io/fence": "42", "note": "x"}}, "m;fencedlease.io/fence=42")},
		{name: "the operator removes the label", allowed: true, reason: ReasonOperator, req: write(Caller{Username: operator}, obj("db", "42"), unlabelled, "")},
		{name: "a break-glass user moves the fence", allowed: true, reason: ReasonBreakGlass, req: write(Caller{Username: "alice"}, obj("db", "42"), obj("db", "1"), "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.req, heldA, principals)
			g.Expect(d.Allowed).To(Equal(tc.allowed), d.Message)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(Equal(tc.message))
		})
	}
}
