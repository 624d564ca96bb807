package holder

// Outcomes of a requested handoff, in Plan.Handoff. An empty Plan.Handoff
// means that no handoff was requested, or that the request must wait (a grant
// is being written): the request stays pending.
const (
	// HandoffStarted: the plan hands the grant over to another candidate,
	// as maxHoldSeconds does (Safe: revoke and wait for the expiry;
	// Immediate: grant the other candidate at once).
	HandoffStarted = "Started"
	// HandoffNotNeeded: the current grant ends anyway (its holder is lost,
	// or it was already revoked): nothing more to do.
	HandoffNotNeeded = "NotNeeded"
	// HandoffRefused: the handoff cannot be done; Plan.HandoffNote says
	// why. The holder, if any, keeps its grant.
	HandoffRefused = "Refused"
)

// Reasons a handoff is refused.
const (
	HandoffNoCandidate = "no other candidate is eligible"
	HandoffPaused      = "the FencedLease is paused"
	HandoffNoHolder    = "no pod holds the lease"
)

// decideHandoff is Decide for a FencedLease with a pending handoff request.
// The request never weakens a rule: the new grant is made exactly as a
// rotation by maxHoldSeconds is, so with Safe takeover the old grant must
// expire first.
func decideHandoff(in Input) Plan {
	plan := decide(in)
	switch in.Lease.State {
	case StatePending:
		return plan
	case StateRevoked:
		plan.Handoff = HandoffNotNeeded
		return plan
	case StateHeld:
	default:
		plan.Handoff, plan.HandoffNote = HandoffRefused, HandoffNoHolder
		return plan
	}
	switch {
	case plan.Action == Revoke || (plan.Action == Grant && plan.Target.UID != in.Lease.HolderUID):
		plan.Handoff = HandoffNotNeeded
		return plan
	case plan.Action == Grant:
		// A fresh grant to the same pod (renewal mode changed): look again
		// once it is committed.
		return plan
	case in.Policy.Paused:
		plan.Handoff, plan.HandoffNote = HandoffRefused, HandoffPaused
		return plan
	}
	next, ok := Choose(in.Candidates, "", in.Lease.HolderUID)
	if !ok || next.UID == in.Lease.HolderUID {
		plan.Handoff, plan.HandoffNote = HandoffRefused, HandoffNoCandidate
		return plan
	}
	const why = "handoff requested"
	if in.Policy.Takeover == TakeoverImmediate {
		return Plan{Action: Grant, Target: next, Rotation: true, Cause: CauseManual, Why: why, Handoff: HandoffStarted}
	}
	return Plan{Action: Revoke, Rotation: true, Cause: CauseManual, Why: why, Handoff: HandoffStarted,
		Waiting: WaitingForExpiry, RequeueAfter: untilExpiry(in)}
}
