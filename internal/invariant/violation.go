package invariant

import "fmt"

// Rule names an invariant.
type Rule string

// The rules whose violations the trackers report.
const (
	// MalformedFence: a pod is published as holder with a fence that does
	// not parse.
	MalformedFence Rule = "malformed fence published"
	// FenceWentDown: a fence is published below one published before for
	// that FencedLease.
	FenceWentDown Rule = "published fence went down"
	// FenceToTwoPods: a fence is published to a pod after it was published
	// to another.
	FenceToTwoPods Rule = "fence published to two pods"
	// FenceRegained: a pod is published a fence again after it lost it.
	FenceRegained Rule = "fence published again after it was lost"
	// TwoHolders: two pods are published as holder of one FencedLease at
	// once.
	TwoHolders Rule = "two holders published at once"
	// StatusFenceBack: a FencedLease's status fence went down.
	StatusFenceBack Rule = "status fence went back"
	// StatusTransitionsBack: a FencedLease's status transitions went down.
	StatusTransitionsBack Rule = "status transitions went back"
	// StatusEndedAgain: a status names a holder again for a grant it
	// recorded as ended.
	StatusEndedAgain Rule = "status names an ended grant again"
	// GrantFenceDown: a grant is committed with a fence not above one
	// committed before for that Lease.
	GrantFenceDown Rule = "granted fence did not grow"
	// GrantTwoHolders: one fence of a Lease is granted to two pods.
	GrantTwoHolders Rule = "one fence granted to two pods"
)

// Violation is one broken rule. Detail names the objects, the fences and
// the pods; it is the whole message.
type Violation struct {
	Rule   Rule
	Detail string
}

func (v Violation) String() string { return v.Detail }

func violation(r Rule, format string, args ...any) Violation {
	return Violation{Rule: r, Detail: fmt.Sprintf(format, args...)}
}
