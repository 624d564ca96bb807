package holder

// decideDeleting handles a Lease that someone deleted: it is the record of
// the grant, and a finalizer keeps it until the grant is over. A grant in
// force is revoked at once (a holder that renews its own grant sees the
// revocation and stops); the Lease is let go only when no pod can still act
// on the grant by the rules of a takeover (Safe: it expired on the
// operator's clock, or the kubelet reports its pod terminated). A Lease let
// go before that would be re-created without the record, and another pod
// granted while the first still believes it holds.
//
// Pausing does not keep a deleted Lease's grant: the deletion asks for it to
// end, as an expiry does.
func decideDeleting(in Input) Plan {
	const why = "the Lease is being deleted"
	switch in.Lease.State {
	case StateHeld:
		return Plan{Action: Revoke, Cause: CauseLeaseDeleted, Why: why, Waiting: WaitingForExpiry, RequeueAfter: untilExpiry(in)}
	case StateRevoked, StatePending:
		// A pending grant may have replaced a committed grant to the same
		// pod that is still valid (decidePending): it waits as a revoked
		// one does.
		if left := untilExpiry(in); left > 0 && in.Policy.Takeover != TakeoverImmediate && !holderTerminated(in) {
			return Plan{Action: Wait, Why: why, Waiting: WaitingForExpiry, RequeueAfter: left}
		}
	}
	return Plan{Action: Drop, Why: why + " and its grant is over"}
}

// holderTerminated says whether the kubelet reports every container of the pod
// the Lease names terminated: nothing of it runs.
func holderTerminated(in Input) bool {
	c, found := Find(in.Candidates, in.Lease.HolderUID)
	return found && c.Terminated
}
