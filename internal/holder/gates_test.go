package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestGates holds each gate, and the order of the chain, to a row: the
// plan the Lease calls for, then what the operator's gates make of it.
func TestGates(t *testing.T) {
	a, b := cand("a", time.Minute, ""), cand("b", 2*time.Minute, "")
	gone := cand("a", time.Minute, IneligibleGone)
	held := func(uid types.UID) Lease { return Lease{State: StateHeld, HolderUID: uid, Fence: 41} }
	clock := func(sinceRenew time.Duration) Clock {
		return Clock{Now: t0, RenewedAt: t0.Add(-sinceRenew), WrittenAt: t0.Add(-sinceRenew), GrantedAt: t0.Add(-time.Hour)}
	}
	immediate := policy(TakeoverImmediate)
	earlier := &Refusal{Reason: fencingv1alpha1.ReasonFenceRegression, Err: &RegressionError{Fence: 40, Floor: 50}, Made: true}
	refused := Gates{LeaseVersion: "100", Floor: 41, Refused: earlier, RefusedFor: 3 * time.Second}
	at := func(rv string, floor int64) Gates { return Gates{LeaseVersion: rv, Floor: floor} }
	with := func(g Gates, f func(*Gates)) Gates { f(&g); return g }
	deferring := func(g *Gates) { g.DeferExpiry = true }
	closed := func(g *Gates) { g.Closed = "first grants are admitted at 5 a second" }

	tests := []struct {
		name    string
		in      Input
		want    Action
		waiting string
		cause   string
		// refusal is the reason of the plan's refusal, "" for none; made
		// whether the plan makes it.
		refusal         string
		made            bool
		spends, behind  bool
		deferred        bool
		requeue         time.Duration
		handoffHandled  bool
		keepsHandoffOut bool
	}{
		{name: "no gate holds back a renewal that is due",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(6 * time.Second), Candidates: []Candidate{a}, Gates: at("100", 41)},
			want: Renew, requeue: 5 * time.Second},
		{name: "a held grant whose version is below the floor is revoked, whatever else is due",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(6 * time.Second), Candidates: []Candidate{a}, Gates: at("30", 41)},
			want: Revoke, cause: CauseRegression, refusal: fencingv1alpha1.ReasonFenceRegression, made: true, requeue: RegressionRetry},
		{name: "a restored grant is revoked even while a handoff is requested",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(time.Second), Candidates: []Candidate{a, b},
				HandoffRequested: true, Gates: at("30", 41)},
			want: Revoke, cause: CauseRegression, refusal: fencingv1alpha1.ReasonFenceRegression, made: true, requeue: RegressionRetry, keepsHandoffOut: true},
		{name: "a first grant waits while first grants are not admitted",
			in:   Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a}, Clock: clock(0), Gates: with(Gates{}, closed)},
			want: Wait, waiting: WaitingForCapacity},
		{name: "a first grant admitted spends from the budget",
			in:   Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a}, Clock: clock(0)},
			want: Grant, spends: true},
		{name: "a takeover goes ahead while first grants are not admitted, and spends",
			in:   Input{Policy: immediate, Lease: held(a.UID), Clock: clock(time.Second), Candidates: []Candidate{gone, b}, Gates: with(at("100", 41), closed)},
			want: Grant, cause: CauseOf(IneligibleGone), spends: true},
		{name: "an expiry found first puts the re-grant behind the renewals, writing nothing",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(20 * time.Second), Candidates: []Candidate{a}, Gates: with(at("100", 41), deferring)},
			want: Wait, spends: true, behind: true, deferred: true, requeue: BehindRenewals},
		{name: "an expiry deferred once is re-granted",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(20 * time.Second), Candidates: []Candidate{a}, Gates: at("100", 41)},
			want: Grant, cause: CauseExpired, spends: true, behind: true},
		{name: "an expiry under a paused spec is revoked behind the renewals too",
			in: Input{Policy: func() Policy { p := policy(TakeoverSafe); p.Paused = true; return p }(), Lease: held(a.UID), Clock: clock(20 * time.Second),
				Candidates: []Candidate{a}, Gates: with(at("100", 41), deferring)},
			want: Wait, behind: true, deferred: true, requeue: BehindRenewals},
		{name: "a grant over a held one whose version is no number revokes it, granting nothing",
			in:   Input{Policy: immediate, Lease: held(a.UID), Clock: clock(time.Second), Candidates: []Candidate{gone, b}, Gates: at("not-a-number", 41)},
			want: Revoke, cause: CauseOf(IneligibleGone), refusal: fencingv1alpha1.ReasonFenceUnavailable, made: true, spends: true, requeue: RegressionRetry},
		{name: "a first grant is not checked before its write: its Lease's version moves on only when written",
			in:   Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a}, Clock: clock(0), Gates: at("30", 41)},
			want: Grant, spends: true},
		{name: "a recent refusal holds a grant back and sets its condition again",
			in:   Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a}, Clock: clock(0), Gates: refused},
			want: Wait, refusal: fencingv1alpha1.ReasonFenceRegression, spends: true, requeue: 3 * time.Second},
		{name: "a recent refusal holds back no renewal",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(6 * time.Second), Candidates: []Candidate{a}, Gates: refused},
			want: Renew, requeue: 5 * time.Second},
		{name: "a handoff held back by a refusal stays requested",
			in: Input{Policy: immediate, Lease: held(a.UID), Clock: clock(time.Second), Candidates: []Candidate{a, b},
				HandoffRequested: true, Gates: refused},
			want: Wait, cause: CauseManual, refusal: fencingv1alpha1.ReasonFenceRegression, spends: true, requeue: 3 * time.Second, keepsHandoffOut: true},
		{name: "admission comes before a refusal: a first grant not admitted waits for capacity",
			in:   Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a}, Clock: clock(0), Gates: with(refused, closed)},
			want: Wait, waiting: WaitingForCapacity},
		{name: "the expiry's deferral comes before a refusal",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(20 * time.Second), Candidates: []Candidate{a}, Gates: with(refused, deferring)},
			want: Wait, spends: true, behind: true, deferred: true, requeue: BehindRenewals},
		{name: "a refusal holds back the re-grant of an expiry deferred once, which stays behind",
			in:   Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(20 * time.Second), Candidates: []Candidate{a}, Gates: refused},
			want: Wait, cause: CauseExpired, refusal: fencingv1alpha1.ReasonFenceRegression, spends: true, behind: true, requeue: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := Decide(tt.in)
			g.Expect(p.Action).To(Equal(tt.want))
			g.Expect(p.Waiting).To(Equal(tt.waiting))
			g.Expect(p.Cause).To(Equal(tt.cause))
			g.Expect(p.Spends).To(Equal(tt.spends), "spends")
			g.Expect(p.Behind).To(Equal(tt.behind), "behind")
			g.Expect(p.Deferred).To(Equal(tt.deferred), "deferred")
			if tt.requeue > 0 {
				g.Expect(p.RequeueAfter).To(Equal(tt.requeue))
			}
			if tt.refusal == "" {
				g.Expect(p.Refusal).To(BeNil())
			} else {
				g.Expect(p.Refusal).NotTo(BeNil())
				g.Expect(p.Refusal.Reason).To(Equal(tt.refusal))
				g.Expect(p.Refusal.Made).To(Equal(tt.made), "made")
				g.Expect(p.Refusal.Message()).NotTo(BeEmpty())
			}
			if tt.keepsHandoffOut {
				g.Expect(p.Handoff).To(BeEmpty(), "a plan that hands nothing over handles no request")
			}
		})
	}
}

// TestGatesLeaveTheLeaseDecisionAlone checks that the zero gates change
// nothing: every plan of the Lease rules passes them as it is, but for the
// budget a grant spends.
func TestGatesLeaveTheLeaseDecisionAlone(t *testing.T) {
	g := NewWithT(t)
	a, b := cand("a", time.Minute, ""), cand("b", 2*time.Minute, "")
	for _, in := range []Input{
		{Policy: policy(TakeoverSafe), Candidates: []Candidate{a, b}, Clock: Clock{Now: t0}},
		{Policy: policy(TakeoverSafe), Lease: Lease{State: StateHeld, HolderUID: a.UID}, Candidates: []Candidate{a, b},
			Clock: Clock{Now: t0, RenewedAt: t0.Add(-20 * time.Second), GrantedAt: t0.Add(-time.Hour)}},
		{Policy: policy(TakeoverImmediate), Lease: Lease{State: StateRevoked, HolderUID: a.UID}, Candidates: []Candidate{a, b}, Clock: Clock{Now: t0}},
	} {
		want := decideLease(in)
		got := Decide(in)
		got.Spends, got.Behind = false, false
		g.Expect(got).To(Equal(want))
	}
}
