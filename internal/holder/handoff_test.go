package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestDecideHandoff(t *testing.T) {
	a, b := cand("a", time.Minute, ""), cand("b", 2*time.Minute, "")
	deadA := cand("a", time.Minute, IneligibleContainers)
	deadB := cand("b", 2*time.Minute, IneligibleNotRunning)
	lostNodeA := cand("a", time.Minute, NodeLost("n1", nil))
	clock := Clock{Now: t0, RenewedAt: t0.Add(-time.Second), GrantedAt: t0.Add(-time.Minute)}
	heldBy := func(uid string, renewal string) Lease {
		return Lease{State: StateHeld, HolderUID: cand(uid, 0, "").UID, Fence: 41, Renewal: renewal}
	}
	paused := policy(TakeoverSafe)
	paused.Paused = true

	tests := []struct {
		name     string
		in       Input
		action   Action
		target   string
		handoff  string
		note     string
		cause    string
		requeue  time.Duration
		rotation bool
	}{
		{name: "Safe: the holder's grant is revoked and the next grant waits for its expiry",
			in:     Input{Policy: policy(TakeoverSafe), Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{a, b}},
			action: Revoke, handoff: HandoffStarted, cause: CauseManual, requeue: 14 * time.Second, rotation: true},
		{name: "Immediate: the other candidate is granted at once",
			in:     Input{Policy: policy(TakeoverImmediate), Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{a, b}},
			action: Grant, target: "b", handoff: HandoffStarted, cause: CauseManual, rotation: true},
		{name: "the holder ready the longest still hands over to the other",
			in:     Input{Policy: policy(TakeoverImmediate), Lease: heldBy("b", ""), Clock: clock, Candidates: []Candidate{a, b}},
			action: Grant, target: "a", handoff: HandoffStarted, cause: CauseManual, rotation: true},
		{name: "no other eligible candidate: refused, the holder is kept and renewed",
			in:     Input{Policy: policy(TakeoverSafe), Lease: heldBy("a", ""), Clock: Clock{Now: t0, RenewedAt: t0.Add(-6 * time.Second), GrantedAt: t0.Add(-time.Minute)}, Candidates: []Candidate{a, deadB}},
			action: Renew, handoff: HandoffRefused, note: HandoffNoCandidate, requeue: 5 * time.Second},
		{name: "alone: refused, the holder is kept",
			in:     Input{Policy: policy(TakeoverImmediate), Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{a}},
			action: Wait, handoff: HandoffRefused, note: HandoffNoCandidate, requeue: 4 * time.Second},
		{name: "paused: refused",
			in:     Input{Policy: paused, Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{a, b}},
			action: Wait, handoff: HandoffRefused, note: HandoffPaused, requeue: 4 * time.Second},
		{name: "a holder lost anyway: the loss stands, with its own cause",
			in:     Input{Policy: policy(TakeoverSafe), Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{deadA, b}},
			action: Revoke, handoff: HandoffNotNeeded, cause: CauseNotReady, requeue: 14 * time.Second},
		{name: "a holder on a lost node, Immediate: the loss stands",
			in:     Input{Policy: policy(TakeoverImmediate), Lease: heldBy("a", ""), Clock: clock, Candidates: []Candidate{lostNodeA, b}},
			action: Grant, target: "b", handoff: HandoffNotNeeded, cause: CauseNodeLost},
		{name: "already revoked: nothing more to do, and Safe still waits",
			in:     Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StateRevoked, HolderUID: a.UID, Fence: 41}, Clock: clock, Candidates: []Candidate{a, b}},
			action: Wait, handoff: HandoffNotNeeded, requeue: 14 * time.Second},
		{name: "no grant: refused",
			in:     Input{Policy: policy(TakeoverSafe), Clock: clock, Candidates: []Candidate{a, b}},
			action: Grant, target: "b", handoff: HandoffRefused, note: HandoffNoHolder},
		{name: "a pending grant: the request waits",
			in:     Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID}, Clock: Clock{Now: t0, RenewedAt: t0, GrantedAt: t0}, Candidates: []Candidate{a, b}},
			action: Wait, requeue: 2 * time.Second},
		{name: "a fresh grant to the same pod (renewal mode changed): the request waits",
			in:     Input{Policy: policy(TakeoverSafe), Lease: heldBy("a", RenewalHolder), Clock: clock, Candidates: []Candidate{a, b}},
			action: Grant, target: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.in.HandoffRequested = true
			p := Decide(tt.in)
			g.Expect(p.Action).To(Equal(tt.action))
			g.Expect(p.Target.Name).To(Equal(tt.target))
			g.Expect(p.Handoff).To(Equal(tt.handoff))
			g.Expect(p.HandoffNote).To(Equal(tt.note))
			g.Expect(p.Cause).To(Equal(tt.cause))
			g.Expect(p.Rotation).To(Equal(tt.rotation))
			g.Expect(p.RequeueAfter).To(Equal(tt.requeue))
		})
	}
}

func TestDecideWithoutRequestIgnoresHandoff(t *testing.T) {
	g := NewWithT(t)
	a, b := cand("a", time.Minute, ""), cand("b", 2*time.Minute, "")
	p := Decide(Input{Policy: policy(TakeoverImmediate), Lease: Lease{State: StateHeld, HolderUID: a.UID, Fence: 41},
		Clock: Clock{Now: t0, RenewedAt: t0.Add(-time.Second), GrantedAt: t0.Add(-time.Minute)}, Candidates: []Candidate{a, b}})
	g.Expect(p.Action).To(Equal(Wait), "an eligible holder is kept")
	g.Expect(p.Handoff).To(BeEmpty())
	g.Expect(p.Cause).To(BeEmpty())
}

func TestCauses(t *testing.T) {
	g := NewWithT(t)
	clock := Clock{Now: t0, RenewedAt: t0.Add(-20 * time.Second), GrantedAt: t0.Add(-time.Minute)}
	a, b := cand("a", time.Minute, ""), cand("b", 2*time.Minute, "")
	held := Lease{State: StateHeld, HolderUID: a.UID, Fence: 41}
	for _, tt := range []struct {
		name  string
		in    Input
		cause string
	}{
		{"expired while eligible", Input{Policy: policy(TakeoverSafe), Lease: held, Clock: clock, Candidates: []Candidate{a, b}}, CauseExpired},
		{"holder stopped renewing", Input{Policy: func() Policy { p := policy(TakeoverSafe); p.Renewal = RenewalHolder; return p }(),
			Lease: Lease{State: StateHeld, HolderUID: a.UID, Fence: 41, Renewal: RenewalHolder}, Clock: clock, Candidates: []Candidate{a, b}}, CauseStoppedRenewing},
		{"gone", Input{Policy: policy(TakeoverSafe), Lease: held, Clock: clock, Candidates: []Candidate{b}}, CauseDeleted},
		{"maxHold", Input{Policy: func() Policy { p := policy(TakeoverSafe); p.MaxHold = 30 * time.Second; return p }(), Lease: held,
			Clock: Clock{Now: t0, RenewedAt: t0, GrantedAt: t0.Add(-time.Minute)}, Candidates: []Candidate{a, b}}, CauseRotation},
		{"released", Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StateReleased, HolderUID: a.UID, Fence: 41}, Clock: clock, Candidates: []Candidate{a, b}}, CauseReleased},
		{"terminated", Input{Policy: policy(TakeoverSafe), Lease: held, Clock: clock, Candidates: []Candidate{func() Candidate { c := a; c.Terminated = true; return c }(), b}}, CauseTerminated},
	} {
		g.Expect(Decide(tt.in).Cause).To(Equal(tt.cause), tt.name)
	}
	g.Expect(CauseOf(IneligibleDeleting)).To(Equal(CauseDeleted))
	g.Expect(CauseOf(IneligibleOverlap)).To(Equal(CauseOverlap))
	g.Expect(CauseOf(NodeLost("n1", nil))).To(Equal(CauseNodeLost))
	g.Expect(ExpiredWhileRunning(CauseExpired)).To(BeTrue())
	g.Expect(ExpiredWhileRunning(CauseNotReady)).To(BeFalse())
}
