package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestDecideDeletingLease(t *testing.T) {
	a, b := cand("a", time.Minute, ""), cand("b", time.Hour, "")
	deadA := cand("a", time.Minute, IneligibleContainers)
	deadA.Terminated = true
	deleting := func(state string) Lease {
		return Lease{State: state, HolderUID: a.UID, Fence: 41, Deleting: true}
	}
	clock := func(sinceRenew time.Duration) Clock {
		return Clock{Now: t0, RenewedAt: t0.Add(-sinceRenew), GrantedAt: t0.Add(-time.Minute)}
	}
	paused := policy(TakeoverSafe)
	paused.Paused = true

	tests := []struct {
		name    string
		in      Input
		action  Action
		cause   string
		requeue time.Duration
	}{
		{name: "a held grant is revoked at once, even with its holder healthy",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateHeld), Clock: clock(time.Second), Candidates: []Candidate{a, b}},
			action: Revoke, cause: CauseLeaseDeleted, requeue: 14 * time.Second},
		{name: "a held grant is revoked while paused",
			in:     Input{Policy: paused, Lease: deleting(StateHeld), Clock: clock(time.Second), Candidates: []Candidate{a, b}},
			action: Revoke, cause: CauseLeaseDeleted, requeue: 14 * time.Second},
		{name: "a handoff request does not grant on a deleted Lease",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateHeld), Clock: clock(time.Second), Candidates: []Candidate{a, b}, HandoffRequested: true},
			action: Revoke, cause: CauseLeaseDeleted, requeue: 14 * time.Second},
		{name: "Safe keeps a revoked grant's record until it expired",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateRevoked), Clock: clock(10 * time.Second), Candidates: []Candidate{a, b}},
			action: Wait, requeue: 5 * time.Second},
		{name: "Safe keeps a pending grant's record until it expired",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StatePending), Clock: clock(3 * time.Second), Candidates: []Candidate{a, b}},
			action: Wait, requeue: 12 * time.Second},
		{name: "Safe lets the Lease go once the grant expired",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateRevoked), Clock: clock(15 * time.Second), Candidates: []Candidate{a, b}},
			action: Drop},
		{name: "Safe lets the Lease go when the kubelet reports the holder terminated",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateRevoked), Clock: clock(time.Second), Candidates: []Candidate{deadA, b}},
			action: Drop},
		{name: "Immediate lets a revoked grant's Lease go at once",
			in:     Input{Policy: policy(TakeoverImmediate), Lease: deleting(StateRevoked), Clock: clock(time.Second), Candidates: []Candidate{a, b}},
			action: Drop},
		{name: "a released grant is over",
			in:     Input{Policy: policy(TakeoverSafe), Lease: deleting(StateReleased), Clock: clock(time.Second), Candidates: []Candidate{a, b}},
			action: Drop},
		{name: "a Lease that never held a grant goes at once",
			in:     Input{Policy: policy(TakeoverSafe), Lease: Lease{Deleting: true}, Clock: clock(0), Candidates: []Candidate{a, b}},
			action: Drop},
		{name: "a paused FencedLease lets an expired grant's Lease go",
			in:     Input{Policy: paused, Lease: deleting(StateRevoked), Clock: clock(20 * time.Second), Candidates: []Candidate{a, b}},
			action: Drop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			plan := Decide(tt.in)
			g.Expect(plan.Action).To(Equal(tt.action), plan.Why)
			g.Expect(plan.Cause).To(Equal(tt.cause))
			g.Expect(plan.RequeueAfter).To(Equal(tt.requeue))
			g.Expect(plan.Target.Name).To(BeEmpty(), "no grant on a deleted Lease")
		})
	}
}
