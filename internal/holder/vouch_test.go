package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fencedlease/fencedlease/internal/record"
)

const voucher = "fencedlease-system/fencedlease-heartbeat"

func vouchingPolicy(takeover string) Policy {
	p := policy(takeover)
	p.Voucher, p.Refresh = voucher, 5*time.Minute
	return p
}

// A grant the heartbeat vouches for is written only when its refresh is
// due: the heartbeat keeps it between.
func TestVouchedGrantIsWrittenOnlyAtItsRefresh(t *testing.T) {
	g := NewWithT(t)
	a := cand("a", time.Minute, "")
	held := Lease{State: StateHeld, HolderUID: a.UID, Fence: 41, Renewal: RenewalOperator, VouchedBy: voucher}
	in := Input{Policy: vouchingPolicy(TakeoverSafe), Lease: held, Candidates: []Candidate{a},
		// The heartbeat renewed it 2 s ago; its own Lease was written 4 min ago.
		Clock: Clock{Now: t0, RenewedAt: t0.Add(-2 * time.Second), WrittenAt: t0.Add(-4 * time.Minute), GrantedAt: t0.Add(-time.Hour)}}
	p := Decide(in)
	g.Expect(p.Action).To(Equal(Wait))
	g.Expect(p.RequeueAfter).To(Equal(time.Minute), "looked at again when its refresh is due")

	in.Clock.WrittenAt = t0.Add(-5 * time.Minute)
	g.Expect(Decide(in).Action).To(Equal(Renew), "refreshed once the refresh interval passed")

	// A heartbeat that stopped: the grant expires as any grant does, and its
	// healthy holder gets a fresh grant (a new fence), never another pod.
	in.Clock.RenewedAt = t0.Add(-15 * time.Second)
	p = Decide(in)
	g.Expect(p.Action).To(Equal(Grant))
	g.Expect(p.Target.Name).To(Equal("a"))
	g.Expect(p.Cause).To(Equal(CauseExpired))
}

// A grant that names no heartbeat, or another one, is renewed on its own
// Lease at the renew interval: the renewal puts it under this heartbeat.
func TestGrantOfAnotherHeartbeatIsRenewedOnItsLease(t *testing.T) {
	g := NewWithT(t)
	a := cand("a", time.Minute, "")
	for _, by := range []string{"", "other/heartbeat"} {
		held := Lease{State: StateHeld, HolderUID: a.UID, Fence: 41, Renewal: RenewalOperator, VouchedBy: by}
		in := Input{Policy: vouchingPolicy(TakeoverSafe), Lease: held, Candidates: []Candidate{a},
			Clock: Clock{Now: t0, RenewedAt: t0.Add(-6 * time.Second), WrittenAt: t0.Add(-6 * time.Second), GrantedAt: t0.Add(-time.Hour)}}
		g.Expect(Decide(in).Action).To(Equal(Renew), "vouched by %q", by)
	}
}

// Holder renewal is never vouched for: its holder's renewals are its clock.
func TestHolderRenewalIsNeverVouched(t *testing.T) {
	g := NewWithT(t)
	p := vouchingPolicy(TakeoverSafe)
	p.Renewal = RenewalHolder
	g.Expect(p.Vouches()).To(BeFalse())
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{record.LeaseRenewal: RenewalHolder}}}
	Vouch(l, p)
	g.Expect(l.Annotations).NotTo(HaveKey(record.LeaseVouchedBy))
	g.Expect(*l.Spec.LeaseDurationSeconds).To(Equal(int32(15)))
}

// The commit of a grant of renewal Operator puts it under the heartbeat:
// the Lease names it and the FencedLease's lease duration, and its own
// duration covers the refresh, so that a reader of the Lease alone never
// sees it expired while the heartbeat keeps it. A renewal without a
// heartbeat takes it back.
func TestCommitPutsTheGrantUnderTheHeartbeat(t *testing.T) {
	g := NewWithT(t)
	a := cand("a", time.Minute, "")
	p := vouchingPolicy(TakeoverSafe)
	pending := GrantWrite(&coordinationv1.Lease{}, a, p, t0, "")
	g.Expect(pending.Annotations).NotTo(HaveKey(record.LeaseVouchedBy), "a pending grant is vouched for by nothing")
	committed := CommitWrite(pending, 57, p, t0)
	r := record.ParseLease(committed.Annotations)
	g.Expect(r.Vouched()).To(BeTrue())
	g.Expect(r.VouchedBy).To(Equal(voucher))
	g.Expect(r.LeaseDuration).To(Equal(15))
	g.Expect(committed.Spec.LeaseDurationSeconds).To(Equal(ptr.To(int32(315))))
	g.Expect(LeaseOf(committed).VouchedBy).To(Equal(voucher))

	renewed := RenewWrite(committed, policy(TakeoverSafe), t0.Add(time.Minute))
	g.Expect(record.ParseLease(renewed.Annotations).Vouched()).To(BeFalse())
	g.Expect(renewed.Spec.LeaseDurationSeconds).To(Equal(ptr.To(int32(15))))
	g.Expect(renewed.Spec.RenewTime.Time).To(Equal(t0.Add(time.Minute)))
}
