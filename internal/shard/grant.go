package shard

import "time"

// Record is what a shard's Lease says of its grant, as the operator read it
// from the API server.
type Record struct {
	// Exists is false when the shard has no Lease yet.
	Exists bool
	// Holder and HolderUID name the pod of the grant ("" when none).
	Holder, HolderUID string
	// State is the grant's state: "", "pending", "held", "revoked" or
	// "released" (record.State*).
	State string
	// Changed is when the grant was last written (the Lease's renewTime):
	// for a revoked grant, when it was revoked.
	Changed time.Time
}

// Target is the pod the plan gives the shard to ("" when no pod is
// eligible).
type Target struct {
	Name, UID string
}

// Action is the one write a shard needs next.
type Action int

// The actions, in the order a shard that moves under Safe goes through
// them: Revoke, Wait, Grant, Commit.
const (
	// None: the shard is owned by its target, or has no target and no
	// live grant.
	None Action = iota
	// Revoke ends the current grant (state revoked, Changed now); the
	// owner's writes are refused from then on, and under Safe the shard
	// waits a lease duration before it is granted again.
	Revoke
	// Wait: the revoked grant's lease has not run out yet (Safe).
	Wait
	// Grant writes a pending grant to the target; the fence is the
	// Lease's resourceVersion that write returns.
	Grant
	// Commit makes the pending grant held with its fence: only then may
	// the target be told, and its writes be accepted.
	Commit
)

// Step decides the next write of one shard. A pending grant was never
// committed, so no pod ever had its fence: it is replaced by a grant to a
// new target at once, under either policy. A held grant is revoked first
// under Safe, and the shard is granted again once the revocation is a
// lease duration old; under Immediate the grant to the new target
// supersedes it in one write, and the fence protects the destination from
// the old owner.
func Step(r Record, t Target, immediate bool, lease time.Duration, now time.Time) (Action, time.Time) {
	live := r.State == stateHeld || r.State == statePending
	mine := r.Holder == t.Name && r.HolderUID == t.UID && t.Name != ""
	switch {
	case t.Name == "" && r.State == stateHeld:
		return Revoke, time.Time{}
	case t.Name == "":
		return None, time.Time{}
	case mine && r.State == stateHeld:
		return None, time.Time{}
	case mine && r.State == statePending:
		return Commit, time.Time{}
	case r.State == stateHeld && !immediate:
		return Revoke, time.Time{}
	case live || immediate || r.State != stateRevoked:
		// Nothing to wait for: no grant yet, or its holder released it.
		return Grant, time.Time{}
	}
	// Revoked, under Safe: wait out the lease of the grant that ended,
	// counted from when it ended.
	if until := r.Changed.Add(lease); now.Before(until) {
		return Wait, until
	}
	return Grant, time.Time{}
}

// The grant states of internal/record, which this package does not import
// (it decides without knowing the records' encoding).
const (
	statePending = "pending"
	stateHeld    = "held"
	stateRevoked = "revoked"
)
