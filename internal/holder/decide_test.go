package holder

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func cand(name string, readyFor time.Duration, ineligible string) Candidate {
	return Candidate{Name: name, UID: types.UID("uid-" + name), ReadySince: t0.Add(-readyFor), Ineligible: ineligible}
}

func policy(takeover string) Policy {
	return Policy{LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second,
		Takeover: takeover, PendingGrace: 2 * time.Second}
}

func TestDecide(t *testing.T) {
	a, b, c := cand("a", time.Minute, ""), cand("b", 2*time.Minute, ""), cand("c", time.Hour, "")
	deadA := cand("a", time.Minute, IneligibleContainers)
	overlapC := cand("c", time.Hour, IneligibleOverlap)
	held := func(uid types.UID) Lease { return Lease{State: StateHeld, HolderUID: uid, Fence: 41} }
	revoked := func(uid types.UID) Lease { return Lease{State: StateRevoked, HolderUID: uid, Fence: 41} }
	clock := func(sinceRenew, sinceGrant time.Duration) Clock {
		return Clock{Now: t0, RenewedAt: t0.Add(-sinceRenew), GrantedAt: t0.Add(-sinceGrant)}
	}
	withMaxHold := func(p Policy, d time.Duration) Policy { p.MaxHold = d; return p }
	holderMode := func(p Policy) Policy { p.Renewal = RenewalHolder; return p }
	terminated := func(c Candidate) Candidate { c.Terminated = true; return c }
	heldBy := func(uid types.UID, renewal string) Lease {
		return Lease{State: StateHeld, HolderUID: uid, Fence: 41, Renewal: renewal}
	}
	paused := func(p Policy) Policy { p.Paused = true; return p }

	tests := []struct {
		name       string
		in         Input
		action     Action
		target     string
		waiting    string
		rotation   bool
		requeueMax time.Duration
	}{
		{name: "free lease grants the candidate ready the longest",
			in:     Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a, b, c}, Clock: clock(0, 0)},
			action: Grant, target: "c"},
		{name: "overlapping pod is never granted",
			in:     Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{a, b, overlapC}, Clock: clock(0, 0)},
			action: Grant, target: "b"},
		{name: "free lease without eligible candidates waits",
			in:     Input{Policy: policy(TakeoverSafe), Candidates: []Candidate{deadA}, Clock: clock(0, 0)},
			action: Wait, waiting: WaitingNoCandidates},
		{name: "eligible holder is kept and renewed when the interval passed, even if another is ready longer",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(6*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Renew, requeueMax: 5 * time.Second},
		{name: "eligible holder within the interval waits for the next renewal",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(2*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Wait, requeueMax: 3 * time.Second},
		{name: "holder not ready in Safe mode is revoked, not replaced",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{deadA, b}},
			action: Revoke, waiting: WaitingForExpiry, requeueMax: 14 * time.Second},
		{name: "holder gone in Safe mode is revoked",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{b}},
			action: Revoke, waiting: WaitingForExpiry},
		{name: "holder not ready in Immediate mode is replaced at once",
			in: Input{Policy: policy(TakeoverImmediate), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{deadA, b}},
			action: Grant, target: "b"},
		{name: "holder lost in Immediate mode with nobody else is revoked",
			in: Input{Policy: policy(TakeoverImmediate), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{deadA}},
			action: Revoke, waiting: WaitingForExpiry},
		{name: "revoked grant in Safe mode waits for expiry",
			in: Input{Policy: policy(TakeoverSafe), Lease: revoked(a.UID), Clock: clock(10*time.Second, time.Minute),
				Candidates: []Candidate{b}},
			action: Wait, waiting: WaitingForExpiry, requeueMax: 5 * time.Second},
		{name: "revoked grant in Safe mode grants after expiry",
			in: Input{Policy: policy(TakeoverSafe), Lease: revoked(a.UID), Clock: clock(15*time.Second, time.Minute),
				Candidates: []Candidate{b}},
			action: Grant, target: "b"},
		{name: "revoked grant prefers another pod over the revoked holder",
			in: Input{Policy: policy(TakeoverSafe), Lease: revoked(c.UID), Clock: clock(20*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Grant, target: "a"},
		{name: "revoked grant goes back to the old holder when it is the only one",
			in: Input{Policy: policy(TakeoverSafe), Lease: revoked(c.UID), Clock: clock(20*time.Second, time.Minute),
				Candidates: []Candidate{c}},
			action: Grant, target: "c"},
		{name: "expired grant of an eligible holder is replaced by a fresh grant, never renewed",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(16*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Grant, target: "a"},
		{name: "pending grant within the grace is left to its writer",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID},
				Clock: clock(time.Second, time.Second), Candidates: []Candidate{a, c}},
			action: Wait, waiting: WaitingGranting, requeueMax: time.Second},
		{name: "pending grant past the grace is superseded by a fresh grant",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID},
				Clock: clock(3*time.Second, 3*time.Second), Candidates: []Candidate{a, c}},
			action: Grant, target: "a"},
		{name: "pending grant whose pod became ineligible waits a lease duration under Safe: it may have replaced a valid grant to that pod",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID, Fence: 41},
				Clock: clock(3*time.Second, 3*time.Second), Candidates: []Candidate{deadA, c}},
			action: Wait, waiting: WaitingForExpiry, requeueMax: 12 * time.Second},
		{name: "pending grant whose pod became ineligible is superseded once a lease duration has passed",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID, Fence: 41},
				Clock: clock(15*time.Second, 15*time.Second), Candidates: []Candidate{deadA, c}},
			action: Grant, target: "c"},
		{name: "pending grant whose pod terminated is superseded at once",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StatePending, HolderUID: a.UID, Fence: 41},
				Clock: clock(3*time.Second, 3*time.Second), Candidates: []Candidate{terminated(deadA), c}},
			action: Grant, target: "c"},
		{name: "pending grant whose pod became ineligible is superseded at once under Immediate",
			in: Input{Policy: policy(TakeoverImmediate), Lease: Lease{State: StatePending, HolderUID: a.UID, Fence: 41},
				Clock: clock(3*time.Second, 3*time.Second), Candidates: []Candidate{deadA, c}},
			action: Grant, target: "c"},
		{name: "maxHold reached in Safe mode revokes for rotation",
			in: Input{Policy: withMaxHold(policy(TakeoverSafe), 30*time.Second), Lease: held(c.UID),
				Clock: clock(time.Second, 31*time.Second), Candidates: []Candidate{a, c}},
			action: Revoke, rotation: true, waiting: WaitingForExpiry},
		{name: "maxHold reached on an expired grant rotates rather than re-granting the holder",
			in: Input{Policy: withMaxHold(policy(TakeoverSafe), 30*time.Second), Lease: held(c.UID),
				Clock: clock(20*time.Second, 31*time.Second), Candidates: []Candidate{a, c}},
			action: Revoke, rotation: true, waiting: WaitingForExpiry},
		{name: "maxHold reached in Immediate mode grants the next one",
			in: Input{Policy: withMaxHold(policy(TakeoverImmediate), 30*time.Second), Lease: held(c.UID),
				Clock: clock(time.Second, 31*time.Second), Candidates: []Candidate{a, c}},
			action: Grant, target: "a", rotation: true},
		{name: "maxHold reached with nobody to rotate to keeps the holder without spinning",
			in: Input{Policy: withMaxHold(policy(TakeoverSafe), 30*time.Second), Lease: held(c.UID),
				Clock: clock(time.Second, 31*time.Second), Candidates: []Candidate{c, deadA}},
			action: Wait, requeueMax: 4 * time.Second},
		{name: "maxHold not reached yet requeues at the deadline",
			in: Input{Policy: withMaxHold(policy(TakeoverSafe), 30*time.Second), Lease: held(c.UID),
				Clock: clock(time.Second, 29*time.Second), Candidates: []Candidate{a, c}},
			action: Wait, requeueMax: time.Second},
		{name: "paused keeps renewing an eligible holder",
			in: Input{Policy: paused(policy(TakeoverSafe)), Lease: held(a.UID), Clock: clock(6*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Renew},
		{name: "paused still revokes a lost holder but grants nobody",
			in: Input{Policy: paused(policy(TakeoverImmediate)), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{deadA, b}},
			action: Revoke, waiting: WaitingPaused},
		{name: "paused grants nothing on a free lease",
			in:     Input{Policy: paused(policy(TakeoverSafe)), Candidates: []Candidate{a}, Clock: clock(0, 0)},
			action: Wait, waiting: WaitingPaused},
		{name: "paused grants nothing after a revoke",
			in: Input{Policy: paused(policy(TakeoverSafe)), Lease: revoked(a.UID), Clock: clock(time.Hour, time.Hour),
				Candidates: []Candidate{b}},
			action: Wait, waiting: WaitingPaused},
		// Holder renewal.
		{name: "holder renewal: the operator never renews, it looks again when the grant would expire",
			in: Input{Policy: holderMode(policy(TakeoverSafe)), Lease: heldBy(a.UID, RenewalHolder), Clock: clock(6*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Wait, requeueMax: 9 * time.Second},
		{name: "holder renewal: a holder that stopped renewing is lost (Safe: revoked; its expiry has passed)",
			in: Input{Policy: holderMode(policy(TakeoverSafe)), Lease: heldBy(a.UID, RenewalHolder), Clock: clock(15*time.Second, time.Minute),
				Candidates: []Candidate{a, b}},
			action: Revoke, waiting: WaitingForExpiry},
		{name: "holder renewal: a holder that stopped renewing is replaced at once (Immediate)",
			in: Input{Policy: holderMode(policy(TakeoverImmediate)), Lease: heldBy(a.UID, RenewalHolder), Clock: clock(15*time.Second, time.Minute),
				Candidates: []Candidate{a, b}},
			action: Grant, target: "b"},
		{name: "holder renewal: the mode changed, the holder gets a fresh grant under the new one",
			in: Input{Policy: holderMode(policy(TakeoverSafe)), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Grant, target: "a"},
		{name: "holder renewal: back to operator renewal, a fresh grant too",
			in: Input{Policy: policy(TakeoverSafe), Lease: heldBy(a.UID, RenewalHolder), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Grant, target: "a"},
		{name: "a grant made before renewal modes existed is an operator-renewed one",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(6*time.Second, time.Minute),
				Candidates: []Candidate{a, c}},
			action: Renew, requeueMax: 5 * time.Second},
		{name: "a released grant is over at once, even with takeover Safe: the next pod is granted",
			in: Input{Policy: policy(TakeoverSafe), Lease: Lease{State: StateReleased, HolderUID: a.UID, Fence: 41}, Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{a, b}},
			action: Grant, target: "b"},
		{name: "a holder pod the kubelet reports terminated counts as released: the next pod is granted at once (Safe)",
			in: Input{Policy: policy(TakeoverSafe), Lease: held(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{terminated(deadA), b}},
			action: Grant, target: "b"},
		{name: "a revoked grant of a pod that terminated since needs no wait either",
			in: Input{Policy: policy(TakeoverSafe), Lease: revoked(a.UID), Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{terminated(deadA), b}},
			action: Grant, target: "b"},
		{name: "a released grant while paused grants nothing",
			in: Input{Policy: paused(policy(TakeoverSafe)), Lease: Lease{State: StateReleased, HolderUID: a.UID, Fence: 41}, Clock: clock(time.Second, time.Minute),
				Candidates: []Candidate{a, b}},
			action: Wait, waiting: WaitingPaused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := Decide(tt.in)
			g.Expect(p.Action).To(Equal(tt.action))
			g.Expect(p.Target.Name).To(Equal(tt.target))
			g.Expect(p.Waiting).To(Equal(tt.waiting))
			g.Expect(p.Rotation).To(Equal(tt.rotation))
			if tt.requeueMax > 0 {
				g.Expect(p.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", tt.requeueMax)))
			}
		})
	}
}
