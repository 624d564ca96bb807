package holder

import "strings"

// Causes of the end of a grant (a handoff), in Plan.Cause. They are few and
// fixed, so that a metric may carry them as a label.
const (
	// CauseDeleted: the holder pod is being deleted, is gone, or is no
	// longer selected.
	CauseDeleted = "deleted"
	// CauseNotReady: the holder pod is not Running, or its containers are
	// not ready.
	CauseNotReady = "not_ready"
	// CauseNodeLost: the holder's node is not Ready, is tainted unreachable
	// or not-ready, or does not exist.
	CauseNodeLost = "node_lost"
	// CauseOverlap: another FencedLease selects the holder pod too.
	CauseOverlap = "overlap"
	// CauseStoppedRenewing: with holder renewal, the holder did not renew
	// its grant within a lease duration.
	CauseStoppedRenewing = "holder_stopped_renewing"
	// CauseExpired: the operator did not see a renewal confirmed within a
	// lease duration while the holder was eligible.
	CauseExpired = "expired"
	// CauseRotation: maxHoldSeconds was reached.
	CauseRotation = "rotation"
	// CauseManual: a handoff was requested (fencedlease.io/handoff-requested-at).
	CauseManual = "manual"
	// CauseReleased: the holder released its grant.
	CauseReleased = "released"
	// CauseTerminated: the kubelet reported every container of the holder
	// pod terminated.
	CauseTerminated = "terminated"
	// CauseLeaseDeleted: the Lease, the record of the grant, was deleted.
	CauseLeaseDeleted = "lease_deleted"
	// CauseRegression: the API server's storage went back in time (an etcd
	// restore) and brought back a grant whose Lease version is not above a
	// fence already published.
	CauseRegression = "fence_regression"
)

// Causes lists every cause: the values of the cause label of the handoff
// metric, whose help names them from this list.
var Causes = []string{CauseDeleted, CauseNotReady, CauseNodeLost, CauseOverlap, CauseStoppedRenewing,
	CauseExpired, CauseRotation, CauseManual, CauseReleased, CauseTerminated, CauseLeaseDeleted, CauseRegression}

// CauseOf is the cause of a loss for a candidate's Ineligible reason.
func CauseOf(ineligible string) string {
	switch {
	case ineligible == IneligibleDeleting || ineligible == IneligibleGone:
		return CauseDeleted
	case ineligible == IneligibleNotRunning || ineligible == IneligibleContainers:
		return CauseNotReady
	case ineligible == IneligibleOverlap:
		return CauseOverlap
	case ineligible == IneligibleStoppedRenewing:
		return CauseStoppedRenewing
	case strings.HasPrefix(ineligible, "node "):
		// Every reason of NodeLost names the node first.
		return CauseNodeLost
	default:
		return CauseNotReady
	}
}

// ExpiredWhileRunning says whether a grant ended for a cause under which the
// holder pod still looked healthy: its containers were ready, yet its grant
// expired (the operator could not renew it, or the holder could not).
func ExpiredWhileRunning(cause string) bool {
	return cause == CauseExpired || cause == CauseStoppedRenewing
}
