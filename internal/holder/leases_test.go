package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

func lease(state, holderUID, fence string, finalizers ...string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: "41", Finalizers: finalizers,
		Annotations: map[string]string{}}, Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](3)}}
	for k, v := range map[string]string{record.LeaseState: state, record.LeaseHolderUID: holderUID, record.AnnotationFence: fence} {
		if v != "" {
			l.Annotations[k] = v
		}
	}
	return l
}

// TestLeaseWrites: each write is the next version of the Lease as read, on
// its resourceVersion, and changes only what it says.
func TestLeaseWrites(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := lease("held", "a", "40", "other.example.com/keep")
	p := Policy{LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second, Renewal: RenewalHolder}

	next := GrantWrite(old, Candidate{Name: "b", UID: "b"}, p, now, "h1")
	g.Expect(next.ResourceVersion).To(Equal("41"), "a compare-and-swap on the version read")
	g.Expect(*next.Spec.HolderIdentity).To(Equal("b"))
	g.Expect(next.Spec.AcquireTime.Time).To(Equal(now))
	g.Expect(next.Spec.RenewTime.Time).To(Equal(now))
	g.Expect(*next.Spec.LeaseDurationSeconds).To(BeEquivalentTo(15))
	g.Expect(*next.Spec.LeaseTransitions).To(BeEquivalentTo(4))
	g.Expect(record.ParseLease(next.Annotations)).To(Equal(record.Lease{State: "pending", HolderUID: "b", Fence: 40,
		Renewal: "Holder", RenewInterval: 5, Handoff: "h1"}), "the last committed fence stays until the commit")
	g.Expect(next.Finalizers).To(Equal([]string{"other.example.com/keep", fencingv1alpha1.LeaseFinalizer}))
	g.Expect(old.Annotations[record.LeaseState]).To(Equal("held"), "the Lease as read is left alone")

	committed := CommitWrite(next, 42, p, now.Add(3*time.Second))
	g.Expect(committed.Spec.RenewTime.Time).To(Equal(now.Add(3*time.Second)), "the commit renews: the holder acts from then on")
	g.Expect(record.ParseLease(committed.Annotations)).To(HaveField("State", "held"))
	g.Expect(record.ParseLease(committed.Annotations)).To(HaveField("Fence", int64(42)))

	renewed := RenewWrite(committed, p, now.Add(4*time.Second))
	g.Expect(renewed.Spec.RenewTime.Time).To(Equal(now.Add(4 * time.Second)))
	g.Expect(renewed.Annotations).To(Equal(committed.Annotations))

	revoked := RevokeWrite(committed, "")
	g.Expect(revoked.Annotations[record.LeaseState]).To(Equal("revoked"))
	g.Expect(*revoked.Spec.HolderIdentity).To(Equal("b"), "the holder and the renew time say when the grant ends")

	// A Lease with the finalizer's old name gets the new one; a deleted one
	// gets none; dropping takes off both.
	legacy := lease("held", "a", "40", "fencedlease.io/grant")
	g.Expect(RenewWrite(legacy, p, now).Finalizers).To(Equal([]string{fencingv1alpha1.LeaseFinalizer}))
	g.Expect(HasRecord(legacy)).To(BeTrue())
	deleting := lease("held", "a", "40")
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	g.Expect(RevokeWrite(deleting, "").Finalizers).To(BeEmpty(), "the API server adds no finalizer to a Lease being deleted")
	both := lease("revoked", "a", "40", "fencedlease.io/grant", "x", fencingv1alpha1.LeaseFinalizer)
	g.Expect(DropWrite(both).Finalizers).To(Equal([]string{"x"}))
	g.Expect(HasRecord(DropWrite(both))).To(BeFalse())

	g.Expect(LeaseOf(committed)).To(Equal(Lease{State: "held", HolderUID: "b", Fence: 42, Renewal: "Holder"}))
}
