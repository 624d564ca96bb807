package fencedlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// TestACommitAppliedLateRenewsWhenSeen: a grant seen pending, whose commit
// was computed at once but applied seconds later (its renewTime is the
// grant's), and which is next seen already revoked, counts as renewed when
// the commit is first seen: its holder may act from the commit on. Judged
// by the renewTime alone, it would count from the grant, and another pod
// could be granted while the holder still may act.
func TestACommitAppliedLateRenewsWhenSeen(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	mem := &memory{}
	at := metav1.NewMicroTime(start)
	lease := func(rv, state string, fence int64) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", ResourceVersion: rv, Annotations: map[string]string{}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("p1"), RenewTime: &at, LeaseTransitions: ptr.To(int32(2))},
		}
		record.Lease{State: state, HolderUID: "uid-p1", Fence: fence}.Apply(l.Annotations)
		return l
	}

	// Pending: the fence is still the previous grant's.
	if c, _ := mem.observe(lease("20", holder.StatePending, 7), 0, clk.Now()); !c.RenewedAt.Equal(start) {
		t.Fatalf("pending grant first seen: renewed at %v, want %v", c.RenewedAt, start)
	}
	clk.Step(3 * time.Second)
	// Revoked after a commit never seen: same renewTime, the new fence.
	c, _ := mem.observe(lease("36", holder.StateRevoked, 20), 0, clk.Now())
	if want := start.Add(3 * time.Second); !c.RenewedAt.Equal(want) {
		t.Errorf("commit seen first on the revoked grant: renewed at %v, want %v (when the commit was seen)", c.RenewedAt, want)
	}
	// Seen again, nothing new: the clock stays.
	clk.Step(time.Second)
	if c, _ := mem.observe(lease("37", holder.StateRevoked, 20), 0, clk.Now()); !c.RenewedAt.Equal(start.Add(3 * time.Second)) {
		t.Errorf("nothing new seen: renewed at %v, want it unchanged", c.RenewedAt)
	}
}
