package holder

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// The writes of the grant step, pure: each returns the next version of the
// Lease as read, which the controller writes as a compare-and-swap on the
// resourceVersion it was read with (the copy keeps it), so that of two
// writers that read the same Lease only one succeeds. Each gives the Lease
// the operator's finalizer (KeepRecord), but for DropWrite, which takes it
// off.

// GrantWrite is the grant: it names the new holder, the renewal mode and
// the renew interval (for a holder that renews), with the times and one
// more transition. Its resulting resourceVersion is the fence; the grant
// stays pending until CommitWrite records that fence. handoff is the
// handoff request the grant carries out, if any ("" leaves the record's).
func GrantWrite(l *coordinationv1.Lease, target Candidate, p Policy, now time.Time, handoff string) *coordinationv1.Lease {
	next := writable(l)
	at := metav1.NewMicroTime(now)
	next.Spec.HolderIdentity = ptr.To(target.Name)
	next.Spec.AcquireTime = &at
	next.Spec.RenewTime = &at
	next.Spec.LeaseDurationSeconds = ptr.To(int32(p.LeaseDuration / time.Second))
	next.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	r := record.ParseLease(next.Annotations)
	r.State, r.HolderUID, r.Renewal, r.RenewInterval = StatePending, string(target.UID), p.Renewal, int(p.RenewInterval/time.Second)
	if handoff != "" {
		r.Handoff = handoff
	}
	// A pending grant is vouched for by nothing: it is never published.
	r.VouchedBy, r.LeaseDuration = "", 0
	r.Apply(next.Annotations)
	return next
}

// CommitWrite records the fence of a pending grant: on the grant's own
// resourceVersion, it succeeds only if nothing else wrote the Lease since.
// The committed grant is put under the policy's heartbeat (Vouch). The
// commit renews the grant (its renewTime is now): the grant is published,
// and its holder may act, only from the commit on, however long after the
// grant write it came, so its lease runs from there, for every replica
// that sees the Lease as for the one that wrote it.
func CommitWrite(l *coordinationv1.Lease, fence int64, p Policy, now time.Time) *coordinationv1.Lease {
	next := writable(l)
	at := metav1.NewMicroTime(now)
	next.Spec.RenewTime = &at
	r := record.ParseLease(next.Annotations)
	r.State, r.Fence = StateHeld, fence
	r.Apply(next.Annotations)
	Vouch(next, p)
	return next
}

// RenewWrite extends the current grant, and puts it under the policy's
// heartbeat or takes it from one (Vouch).
func RenewWrite(l *coordinationv1.Lease, p Policy, now time.Time) *coordinationv1.Lease {
	next := writable(l)
	at := metav1.NewMicroTime(now)
	next.Spec.RenewTime = &at
	Vouch(next, p)
	return next
}

// Vouch puts a committed grant of renewal Operator under the policy's
// heartbeat: it names the heartbeat and the lease duration, and gives the
// Lease a duration that covers the refresh interval too, so that a reader
// of the Lease alone never sees the grant expired while it is held. A
// grant the heartbeat does not vouch for (renewal Holder, or an operator
// without a heartbeat) names none, and its Lease the lease duration.
func Vouch(l *coordinationv1.Lease, p Policy) {
	r := record.ParseLease(l.Annotations)
	r.VouchedBy, r.LeaseDuration = "", 0
	l.Spec.LeaseDurationSeconds = ptr.To(int32(p.LeaseDuration / time.Second))
	if p.Vouches() && renewal(r.Renewal) == RenewalOperator {
		r.VouchedBy, r.LeaseDuration = p.Voucher, int(p.LeaseDuration/time.Second)
		l.Spec.LeaseDurationSeconds = ptr.To(int32((p.LeaseDuration + p.Refresh) / time.Second))
	}
	r.Apply(l.Annotations)
}

// RevokeWrite marks the grant as no longer renewed. It keeps the holder and
// the renew time, which say when the grant ends; handoff is the handoff
// request the revocation carries out, if any ("" leaves the record's).
func RevokeWrite(l *coordinationv1.Lease, handoff string) *coordinationv1.Lease {
	next := writable(l)
	r := record.ParseLease(next.Annotations)
	r.State = StateRevoked
	if handoff != "" {
		r.Handoff = handoff
	}
	r.Apply(next.Annotations)
	return next
}

// DropWrite lets a deleted Lease go once its grant is over: it takes the
// operator's finalizer off, and the Lease is gone.
func DropWrite(l *coordinationv1.Lease) *coordinationv1.Lease {
	next := l.DeepCopy()
	next.Finalizers = withoutRecord(next.Finalizers)
	return next
}

// legacyLeaseFinalizer is what the operator's finalizer on Leases was
// called before it had a name of its own (it shared the name of the pod
// annotation fencedlease.io/grant). A Lease that carries it gets the new one
// with its next write; either keeps a deleted Lease until its grant is
// over.
const legacyLeaseFinalizer = fencingv1alpha1.Prefix + "grant"

// HasRecord says whether the Lease carries the operator's finalizer.
func HasRecord(l *coordinationv1.Lease) bool {
	return slices.Contains(l.Finalizers, fencingv1alpha1.LeaseFinalizer) || slices.Contains(l.Finalizers, legacyLeaseFinalizer)
}

// KeepRecord gives a Lease the operator's finalizer (a Lease written before
// there was one gets it with its next write), unless it is being deleted:
// the API server adds no finalizer then.
func KeepRecord(l *coordinationv1.Lease) {
	if l.DeletionTimestamp != nil ||
		slices.Contains(l.Finalizers, fencingv1alpha1.LeaseFinalizer) && !slices.Contains(l.Finalizers, legacyLeaseFinalizer) {
		return
	}
	l.Finalizers = append(withoutRecord(l.Finalizers), fencingv1alpha1.LeaseFinalizer)
}

// WithoutRecord returns the finalizers without the operator's (either
// name).
func WithoutRecord(l *coordinationv1.Lease) []string { return withoutRecord(l.Finalizers) }

func withoutRecord(finalizers []string) []string {
	out := []string{}
	for _, f := range finalizers {
		if f != fencingv1alpha1.LeaseFinalizer && f != legacyLeaseFinalizer {
			out = append(out, f)
		}
	}
	return out
}

// writable is a copy of l to write, with annotations and the operator's
// finalizer.
func writable(l *coordinationv1.Lease) *coordinationv1.Lease {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	KeepRecord(next)
	return next
}

// LeaseOf reads the grant a Lease records, as Decide sees it.
func LeaseOf(l *coordinationv1.Lease) Lease {
	r := record.ParseLease(l.Annotations)
	return Lease{State: r.State, HolderUID: types.UID(r.HolderUID), Fence: r.Fence, Renewal: r.Renewal, Deleting: l.DeletionTimestamp != nil,
		VouchedBy: r.VouchedBy}
}
