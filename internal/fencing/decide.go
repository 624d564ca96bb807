package fencing

import (
	"errors"
	"fmt"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Precheck applies the rules that need no grant: the principals, the
// protection labels, the form of the fence, and callers that are not pods,
// whose writes and deletes are denied whatever fence they present. It
// reports final when that settles the request; otherwise the webhook reads
// the grant of the protector (ProtectedBy: a FencedLease, or a shard of a
// FencedShardSet) and calls Decide. So a caller that is not a pod never
// costs a read, from the cache or from the API server.
func Precheck(r Request, p Principals) (d Decision, final bool) {
	prot, ok := ProtectedBy(r)
	d = Decision{Lease: prot.String()}
	if !ok {
		return allow(d, ReasonUnprotected), true
	}
	switch {
	case p.isOperator(r.Caller):
		return allow(d, ReasonOperator), true
	case p.isBreakGlass(r.Caller):
		d.Audit = !r.DryRun
		return allow(d, ReasonBreakGlass), true
	case r.Caller.IsSystemCleanup() && (r.Operation == Delete || (r.Operation == Update && r.OwnershipOnly)):
		return allow(d, ReasonSystemCleanup), true
	}
	m := messages{r: r, p: prot}
	if prot.Name == "" {
		return deny(d, ReasonInvalidLabel, m.invalidLabel()), true
	}
	if prot.Sharded && prot.Shard == "" {
		return deny(d, ReasonInvalidLabel, m.invalidShardLabel()), true
	}
	if r.Operation == Delete {
		if !r.Caller.IsPod() {
			return deny(d, ReasonDeleteNotPod, m.deleteNotPod()), true
		}
		return d, false
	}
	// The label rule holds on every path that carries the old and the new
	// object, a subresource write's included: the API server keeps label
	// changes on the status writes of most built-in resources.
	if msg, ok := checkLabels(r, m); !ok {
		return deny(d, ReasonLabelChanged, msg), true
	}
	if o, got, ok := checkOwners(r, prot); !ok {
		return deny(d, ReasonOwnerUnprotected, m.ownerUnprotected(o, got.Unreadable)), true
	}
	if r.SubResource != "" {
		return precheckSubResource(r, d, m)
	}
	newObj := r.New
	if newObj == nil {
		newObj = &Object{}
	}
	raw, has := newObj.Annotations[fencingv1alpha1.AnnotationFence]
	if !has {
		return deny(d, ReasonMissingFence, m.missingFence()), true
	}
	n, err := record.ParseFence(raw)
	if err != nil {
		return deny(d, ReasonMalformedFence, m.malformedFence(err)), true
	}
	d.Fence, m.fence = n, n
	if !r.Caller.IsPod() {
		return deny(d, ReasonWriteNotPod, m.writeNotPod()), true
	}
	return d, false
}

// precheckSubResource: a subresource write (status, scale) carries its
// fence in its field manager, and must carry one, like a write of the
// object: the holder pod's identity alone cannot tell its current grant
// from an older grant of the same pod, whose process may still act. It may
// not change the stored fence annotation at all: only a write of the object
// moves it (the API server keeps annotation changes on the status writes
// of most built-in resources, so a status write could otherwise raise the
// stored fence out of the holder's reach, or lower it).
func precheckSubResource(r Request, d Decision, m messages) (Decision, bool) {
	if r.Old != nil && r.New != nil {
		was, had := r.Old.Annotations[fencingv1alpha1.AnnotationFence]
		is, has := r.New.Annotations[fencingv1alpha1.AnnotationFence]
		if had != has || was != is {
			return deny(d, ReasonSubresourceMetadata, m.subresourceFenceChanged(was, had, is, has)), true
		}
	}
	_, n, err := fieldmanager.Parse(r.FieldManager)
	if errors.Is(err, fieldmanager.ErrNoFence) {
		return deny(d, ReasonMissingFence, m.missingFieldManagerFence()), true
	}
	if err != nil {
		return deny(d, ReasonMalformedFence, m.malformedFieldManagerFence(err)), true
	}
	d.Fence, m.fence = n, n
	if !r.Caller.IsPod() {
		return deny(d, ReasonWriteNotPod, m.writeNotPod()), true
	}
	return d, false
}

// Decide applies the rules of the fencing webhook to a request. lease is the
// grant of the protector named by ProtectedBy (the FencedLease, or the
// shard of the FencedShardSet) as the API server holds it now: the webhook
// reads it for every decision that needs it, never from a cache that may
// lag behind a newer grant (two webhook replicas have two caches, and a
// cache that has not seen a grant would admit the writes it replaced). A
// request that Precheck settles gets its answer, whatever lease says.
func Decide(r Request, lease Lease, p Principals) Decision {
	d, final := Precheck(r, p)
	if !final {
		d = decideHolder(r, lease, d)
	}
	d.StaleWrite = !d.Allowed && !r.DryRun && r.Caller.IsPod() && isStale(d.Reason)
	return d
}

// decideHolder decides a write or a delete by a pod from the grant of the
// object's protector: the same rules for a FencedLease and for a shard.
func decideHolder(r Request, lease Lease, d Decision) Decision {
	prot, _ := ProtectedBy(r)
	m := messages{r: r, p: prot, fence: d.Fence, current: lease.Fence}
	if r.Operation == Delete {
		return decideDelete(r, lease, d, m)
	}
	n := d.Fence
	// A stale holder is named as such first, as that says more than the
	// object's order.
	if lease.Found && n < lease.Fence {
		return deny(d, ReasonStaleFence, m.stale())
	}
	if stored := storedFence(r.Old, prot); n < stored {
		return deny(d, ReasonObjectFenceRegression, m.objectRegression(stored))
	}
	switch {
	case !lease.Found:
		return denyNotFound(d, lease, m)
	case n > lease.Fence:
		return deny(d, ReasonUnknownFence, m.unknown())
	case lease.Holder == nil:
		return deny(d, ReasonNoHolder, m.noHolder())
	case r.Caller.PodUID != lease.Holder.PodUID:
		return deny(d, ReasonNotHolder, m.notHolder(lease.Holder))
	}
	return allow(d, ReasonHolder)
}

// decideDelete: a DELETE cannot carry a fence, so only the holder pod may delete a
// protected object, and only one last written under a grant the
// FencedLease has made: a stored fence above the current one was never
// granted (a restore of the storage, or an annotation written by a
// break-glass user), and the holder of an older grant must not delete it.
//
// A DELETE needs more: the object must have been last written with the
// current fence. The pod's identity says which pod deletes, not under which
// of its grants: a pod that lost the lease and was granted it again may
// still run a process of its old grant (paused, then woken), and that
// process, by identity the holder, would delete what the holders in between
// wrote. A write carries its fence, so a stale process cannot put the
// current one on the object; the holder does, then deletes that version
// (pkg/fencedcontroller's Delete does both).
func decideDelete(r Request, lease Lease, d Decision, m messages) Decision {
	switch {
	case !lease.Found:
		return denyNotFound(d, lease, m)
	case lease.Holder == nil:
		return deny(d, ReasonNoHolder, m.noHolder())
	case r.Caller.PodUID != lease.Holder.PodUID:
		return deny(d, ReasonNotHolder, m.notHolder(lease.Holder))
	}
	stored := storedFence(r.Old, m.p)
	switch {
	case stored > lease.Fence:
		return deny(d, ReasonUnknownFence, m.storedUnknown(stored))
	case stored < lease.Fence:
		return deny(d, ReasonDeleteOlderWrite, m.deleteOlderWrite(stored))
	}
	return allow(d, ReasonHolder)
}

// denyNotFound denies a request whose protector has no grant to decide on:
// no FencedLease or FencedShardSet of the label's name, or a set without
// the object's shard.
func denyNotFound(d Decision, lease Lease, m messages) Decision {
	if lease.NoShard {
		return deny(d, ReasonUnknownShard, m.unknownShard())
	}
	return deny(d, ReasonLeaseNotFound, m.leaseNotFound())
}

// isStale says whether a denial names a stale or impostor holder: a pod that
// acts on a grant it no longer has, or never had.
func isStale(r Reason) bool {
	switch r {
	case ReasonStaleFence, ReasonObjectFenceRegression, ReasonUnknownFence, ReasonNotHolder:
		return true
	}
	return false
}

// storedFence is the fence of the last accepted writer of the stored object,
// if that object was protected by the same protector (the same FencedLease,
// or the same shard of the same FencedShardSet). A fence on an object that
// was not (an unlabelled object that anyone with write access could
// annotate, or one protected by another FencedLease or shard) orders
// nothing: else a huge fence annotated beforehand would keep the holder from
// ever protecting the object. An annotation that does not parse (written by
// the operator or a break-glass user) stores no order, like an absent one.
func storedFence(old *Object, p Protector) int64 {
	if old == nil {
		return 0
	}
	if was, ok := ProtectorOf(old.Labels); !ok || was != p {
		return 0
	}
	n, err := record.ParseFence(old.Annotations[fencingv1alpha1.AnnotationFence])
	if err != nil {
		return 0
	}
	return n
}

func allow(d Decision, reason Reason) Decision {
	d.Allowed, d.Reason = true, reason
	return d
}

func deny(d Decision, reason Reason, msg string) Decision {
	d.Allowed, d.Reason, d.Message = false, reason, msg
	return d
}

// messages formats denials. Every one names the object and its protector;
// those about the order of fences name the presented and the current fence.
type messages struct {
	r              Request
	p              Protector
	fence, current int64
}

func (m messages) object() string {
	if m.r.SubResource != "" {
		return fmt.Sprintf("%s %s/%s (%s)", m.r.Kind, m.r.Namespace, m.r.Name, m.r.SubResource)
	}
	return fmt.Sprintf("%s %s/%s", m.r.Kind, m.r.Namespace, m.r.Name)
}

// rejected is the head of a message: "ConfigMap ns/name: write with fence 41 rejected".
func (m messages) rejected() string {
	switch {
	case m.r.Operation == Delete:
		return m.object() + ": delete rejected"
	case m.fence > 0:
		return fmt.Sprintf("%s: write with fence %d rejected", m.object(), m.fence)
	}
	return m.object() + ": write rejected"
}

func (m messages) ownerUnprotected(o OwnerRef, unreadable bool) string {
	protects := "an object it protects"
	if m.p.Sharded {
		protects = "an object the same shard protects"
	}
	msg := fmt.Sprintf("%s: owner %s is not protected by %s: an owner of a protected object must be that %s "+
		"or %s, of a protected resource; otherwise a writer without the current fence could delete the owner, "+
		"and the garbage collector would then delete this object", m.object(), o, m.p.describe(), m.p.Kind(), protects)
	if unreadable {
		msg += fmt.Sprintf(" (the operator may not read %s objects, so it cannot tell: grant it get on them to allow such owners)", o.Kind)
	}
	return msg
}

func (m messages) invalidLabel() string {
	return fmt.Sprintf("%s: label %s must name a %s in the same namespace", m.rejected(), fencingv1alpha1.LabelProtectedBy, m.p.Kind())
}

func (m messages) invalidShardLabel() string {
	return fmt.Sprintf("%s: label %s must name a shard of FencedShardSet %q", m.rejected(), fencingv1alpha1.LabelShard, m.p.Name)
}

func (m messages) missingFence() string {
	return fmt.Sprintf("%s: no %s annotation: only the holder of %s may write this object, with its fence",
		m.rejected(), fencingv1alpha1.AnnotationFence, m.p.describe())
}

// missingFieldManagerFence keeps the words of missingFence ("no
// fencedlease.io/fence annotation") that pkg/fencedcontroller recognises,
// and says where a subresource write carries its fence.
func (m messages) missingFieldManagerFence() string {
	return fmt.Sprintf("%s: no %s annotation: a %s write cannot carry one on the object: it carries its fence in its field manager (<manager>%s<N>); only the holder of %s may write this object, with its fence",
		m.rejected(), fencingv1alpha1.AnnotationFence, m.r.SubResource, fieldmanager.Fence, m.p.describe())
}

func (m messages) subresourceFenceChanged(was string, had bool, is string, has bool) string {
	show := func(v string, ok bool) string {
		if !ok {
			return "absent"
		}
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%s: a %s write cannot change annotation %s (from %s to %s): only a write of the object itself moves the stored fence",
		m.rejected(), m.r.SubResource, fencingv1alpha1.AnnotationFence, show(was, had), show(is, has))
}

func (m messages) malformedFence(err error) string {
	return fmt.Sprintf("%s: annotation %s: %v", m.rejected(), fencingv1alpha1.AnnotationFence, err)
}

func (m messages) malformedFieldManagerFence(err error) string {
	return fmt.Sprintf("%s: the fence in the field manager (%s<N>): %v", m.rejected(), fieldmanager.Fence, err)
}

func (m messages) objectRegression(stored int64) string {
	return fmt.Sprintf("%s: the object was last written with fence %d", m.rejected(), stored)
}

func (m messages) leaseNotFound() string {
	if m.p.Sharded {
		return fmt.Sprintf("%s: FencedShardSet %q not found in namespace %s, so its shard %q has no holder",
			m.rejected(), m.p.Name, m.r.Namespace, m.p.Shard)
	}
	return fmt.Sprintf("%s: FencedLease %q not found in namespace %s", m.rejected(), m.p.Name, m.r.Namespace)
}

func (m messages) unknownShard() string {
	return fmt.Sprintf("%s: FencedShardSet %q has no shard %q: label %s must name one of its shards (spec.shards or spec.keys)",
		m.rejected(), m.p.Name, m.p.Shard, fencingv1alpha1.LabelShard)
}

func (m messages) stale() string {
	return fmt.Sprintf("%s: stale holder: %s is at fence %d", m.rejected(), m.p.describe(), m.current)
}

func (m messages) unknown() string {
	return fmt.Sprintf("%s: unknown fence: %s is at fence %d", m.rejected(), m.p.describe(), m.current)
}

func (m messages) storedUnknown(stored int64) string {
	return fmt.Sprintf("%s: the object carries fence %d, which %s never granted (it is at fence %d)",
		m.rejected(), stored, m.p.describe(), m.current)
}

func (m messages) noHolder() string {
	return fmt.Sprintf("%s: %s has no holder (fence %d)", m.rejected(), m.p.describe(), m.current)
}

func (m messages) notHolder(h *Holder) string {
	return fmt.Sprintf("%s: pod %s is not the holder of %s (holder: pod %s, fence %d)",
		m.rejected(), m.r.Caller.PodName, m.p.describe(), h.PodName, m.current)
}

func (m messages) writeNotPod() string {
	return fmt.Sprintf("%s: user %q is not a pod: only the holder pod of %s may write this object (a fence is no proof of identity)",
		m.rejected(), m.r.Caller.Username, m.p.describe())
}

func (m messages) deleteOlderWrite(stored int64) string {
	was := fmt.Sprintf("was last written with fence %d", stored)
	if stored == 0 {
		was = "carries no fence"
	}
	return fmt.Sprintf("%s: the object %s, not with the current fence %d of %s: the holder deletes only what carries its current fence (write %s=%d on it first, then delete that version)",
		m.rejected(), was, m.current, m.p.describe(), fencingv1alpha1.AnnotationFence, m.current)
}

func (m messages) deleteNotPod() string {
	return fmt.Sprintf("%s: a delete carries no fence: only the holder pod of %s may delete this object", m.rejected(), m.p.describe())
}
