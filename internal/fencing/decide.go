package fencing

import (
	"fmt"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
)

// ProtectedBy returns the name of the FencedLease that protects the object
// of the request: the label of the stored object, or of the new object when
// the stored one has none (CREATE, or an UPDATE that adds protection). ok is
// false when neither carries the label.
func ProtectedBy(r Request) (name string, ok bool) {
	for _, o := range []*Object{r.Old, r.New} {
		if o == nil {
			continue
		}
		if v, has := o.Labels[fencingv1alpha1.LabelProtectedBy]; has {
			return v, true
		}
	}
	return "", false
}

// Precheck applies the rules that need no FencedLease: the principals, the
// protected-by label, the form of the fence, and callers that are not pods,
// whose writes and deletes are denied whatever fence they present. It
// reports final when that settles the request; otherwise the webhook reads
// the FencedLease and calls Decide. So a caller that is not a pod never
// costs a read, from the cache or from the API server.
func Precheck(r Request, p Principals) (d Decision, final bool) {
	name, ok := ProtectedBy(r)
	d = Decision{Lease: name}
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
	m := messages{r: r, lease: name}
	if name == "" {
		return deny(d, ReasonInvalidLabel, m.invalidLabel()), true
	}
	if r.Operation == Delete {
		if !r.Caller.IsPod() {
			return deny(d, ReasonDeleteNotPod, m.deleteNotPod()), true
		}
		return d, false
	}
	if r.Old != nil && r.New != nil {
		if _, had := r.Old.Labels[fencingv1alpha1.LabelProtectedBy]; had {
			if v, has := r.New.Labels[fencingv1alpha1.LabelProtectedBy]; !has || v != name {
				return deny(d, ReasonLabelChanged, m.labelChanged(v, has)), true
			}
		}
	}
	newObj := r.New
	if newObj == nil {
		newObj = &Object{}
	}
	raw, has := newObj.Annotations[fencingv1alpha1.AnnotationFence]
	if !has {
		return deny(d, ReasonMissingFence, m.missingFence()), true
	}
	n, err := fence.ParseFence(raw)
	if err != nil {
		return deny(d, ReasonMalformedFence, m.malformedFence(err)), true
	}
	d.Fence, m.fence = n, n
	if !r.Caller.IsPod() {
		return deny(d, ReasonWriteNotPod, m.writeNotPod()), true
	}
	return d, false
}

// Decide applies the rules of the fencing webhook to a request. lease is the
// state of the FencedLease named by ProtectedBy; fresh says whether it was
// read from the API server (true) or from a cache that may lag (false). With
// fresh false, a decision that a newer grant could change comes back with
// Reread set instead of a denial. A request that Precheck settles gets its
// answer, whatever lease says.
func Decide(r Request, lease Lease, fresh bool, p Principals) Decision {
	d, final := Precheck(r, p)
	if !final {
		d = decideHolder(r, lease, fresh, d)
	}
	d.StaleWrite = !d.Allowed && !d.Reread && !r.DryRun && r.Caller.IsPod() && isStale(d.Reason)
	return d
}

// decideHolder decides a write or a delete by a pod from the FencedLease.
func decideHolder(r Request, lease Lease, fresh bool, d Decision) Decision {
	m := messages{r: r, lease: d.Lease, fence: d.Fence, current: lease.Fence}
	if r.Operation == Delete {
		return decideDelete(r, lease, fresh, d, m)
	}
	n := d.Fence
	// Both orders below are final without a fresh read: fences only
	// increase and a cache is never ahead of the API server. A stale holder
	// is named as such first, as that says more than the object's order.
	if lease.Found && n < lease.Fence {
		return deny(d, ReasonStaleFence, m.stale())
	}
	if stored := storedFence(r.Old, d.Lease); n < stored {
		return deny(d, ReasonObjectFenceRegression, m.objectRegression(stored))
	}
	switch {
	case !lease.Found:
		return rereadOr(fresh, d, ReasonLeaseNotFound, m.leaseNotFound())
	case n > lease.Fence:
		return rereadOr(fresh, d, ReasonUnknownFence, m.unknown())
	case lease.Holder == nil:
		return rereadOr(fresh, d, ReasonNoHolder, m.noHolder())
	case r.Caller.PodUID != lease.Holder.PodUID:
		return rereadOr(fresh, d, ReasonNotHolder, m.notHolder(lease.Holder))
	}
	return allow(d, ReasonHolder)
}

// decideDelete: a DELETE cannot carry a fence, so only the holder pod may
// delete a protected object.
func decideDelete(r Request, lease Lease, fresh bool, d Decision, m messages) Decision {
	switch {
	case !lease.Found:
		return rereadOr(fresh, d, ReasonLeaseNotFound, m.leaseNotFound())
	case lease.Holder == nil:
		return rereadOr(fresh, d, ReasonNoHolder, m.noHolder())
	case r.Caller.PodUID != lease.Holder.PodUID:
		return rereadOr(fresh, d, ReasonNotHolder, m.notHolder(lease.Holder))
	}
	return allow(d, ReasonHolder)
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
// if that object was protected by the same FencedLease. A fence on an object
// that was not (an unlabelled object that anyone with write access could
// annotate, or one protected by another FencedLease) orders nothing: else a
// huge fence annotated beforehand would keep the holder from ever protecting
// the object. An annotation that does not parse (written by the operator or
// a break-glass user) stores no order, like an absent one.
func storedFence(old *Object, lease string) int64 {
	if old == nil || old.Labels[fencingv1alpha1.LabelProtectedBy] != lease {
		return 0
	}
	n, err := fence.ParseFence(old.Annotations[fencingv1alpha1.AnnotationFence])
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

// rereadOr denies with fresh state, and asks for a fresh read otherwise.
func rereadOr(fresh bool, d Decision, reason Reason, msg string) Decision {
	if !fresh {
		d.Reread, d.Reason = true, reason
		return d
	}
	return deny(d, reason, msg)
}

// messages formats denials. Every one names the object; those about the
// order of fences name the presented and the current fence.
type messages struct {
	r              Request
	lease          string
	fence, current int64
}

func (m messages) object() string {
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

func (m messages) invalidLabel() string {
	return fmt.Sprintf("%s: label %s must name a FencedLease in the same namespace", m.rejected(), fencingv1alpha1.LabelProtectedBy)
}

func (m messages) labelChanged(to string, has bool) string {
	change := "removed"
	if has {
		change = fmt.Sprintf("changed to %q", to)
	}
	return fmt.Sprintf("%s: label %s=%s cannot be %s (only the operator or a break-glass user can)",
		m.rejected(), fencingv1alpha1.LabelProtectedBy, m.lease, change)
}

func (m messages) missingFence() string {
	return fmt.Sprintf("%s: no %s annotation: only the holder of FencedLease %q may write this object, with its fence",
		m.rejected(), fencingv1alpha1.AnnotationFence, m.lease)
}

func (m messages) malformedFence(err error) string {
	return fmt.Sprintf("%s: annotation %s: %v", m.rejected(), fencingv1alpha1.AnnotationFence, err)
}

func (m messages) objectRegression(stored int64) string {
	return fmt.Sprintf("%s: the object was last written with fence %d", m.rejected(), stored)
}

func (m messages) leaseNotFound() string {
	return fmt.Sprintf("%s: FencedLease %q not found in namespace %s", m.rejected(), m.lease, m.r.Namespace)
}

func (m messages) stale() string {
	return fmt.Sprintf("%s: stale holder: FencedLease %q is at fence %d", m.rejected(), m.lease, m.current)
}

func (m messages) unknown() string {
	return fmt.Sprintf("%s: unknown fence: FencedLease %q is at fence %d", m.rejected(), m.lease, m.current)
}

func (m messages) noHolder() string {
	return fmt.Sprintf("%s: FencedLease %q has no holder (fence %d)", m.rejected(), m.lease, m.current)
}

func (m messages) notHolder(h *Holder) string {
	return fmt.Sprintf("%s: pod %s is not the holder of FencedLease %q (holder: pod %s, fence %d)",
		m.rejected(), m.r.Caller.PodName, m.lease, h.PodName, m.current)
}

func (m messages) writeNotPod() string {
	return fmt.Sprintf("%s: user %q is not a pod: only the holder pod of FencedLease %q may write this object (a fence is no proof of identity)",
		m.rejected(), m.r.Caller.Username, m.lease)
}

func (m messages) deleteNotPod() string {
	return fmt.Sprintf("%s: a delete carries no fence: only the holder pod of FencedLease %q may delete this object", m.rejected(), m.lease)
}
