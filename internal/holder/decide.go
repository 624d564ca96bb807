package holder

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Takeover policies, as in the FencedLease API.
const (
	TakeoverSafe      = string(fencingv1alpha1.TakeoverSafe)
	TakeoverImmediate = string(fencingv1alpha1.TakeoverImmediate)
)

// Grant states, as recorded on the Lease (StateFree: no grant yet).
const (
	StateFree     = ""
	StatePending  = fencingv1alpha1.LeaseStatePending
	StateHeld     = fencingv1alpha1.LeaseStateHeld
	StateRevoked  = fencingv1alpha1.LeaseStateRevoked
	StateReleased = fencingv1alpha1.LeaseStateReleased
)

// Renewal modes, as in the FencedLease API.
const (
	RenewalOperator = string(fencingv1alpha1.RenewalOperator)
	RenewalHolder   = string(fencingv1alpha1.RenewalHolder)
)

// Policy is the effective timing and behaviour of one FencedLease.
type Policy struct {
	LeaseDuration time.Duration
	RenewInterval time.Duration
	// MaxHold bounds one grant; 0 is unlimited.
	MaxHold  time.Duration
	Takeover string
	Paused   bool
	// Renewal is who renews a grant (RenewalOperator or RenewalHolder).
	Renewal string
	// PendingGrace is how long a pending (written, not committed) grant is
	// left alone before it is superseded. An operator commits its own grant
	// within milliseconds; the grace keeps two operator replicas from
	// superseding each other's in-flight grants forever.
	PendingGrace time.Duration
	// Voucher is the operator's heartbeat Lease (namespace/name) that
	// vouches for the grants it holds with renewal Operator, "" when this
	// operator renews each grant itself; Refresh is how often a vouched
	// grant's own Lease is written all the same (design.md, "A quiet
	// lease").
	Voucher string
	Refresh time.Duration
}

// Vouches says whether grants of this policy are vouched for by the
// operator's heartbeat.
func (p Policy) Vouches() bool {
	return p.Voucher != "" && p.Refresh > 0 && renewal(p.Renewal) == RenewalOperator
}

// Lease is the state of the grant recorded on the coordination Lease.
type Lease struct {
	State     string
	HolderUID types.UID
	// Fence is the fence of the last committed grant.
	Fence int64
	// Renewal is the renewal mode the grant was made under.
	Renewal string
	// Deleting says that the Lease is being deleted: it is kept, by the
	// operator's finalizer, until its grant is over.
	Deleting bool
	// VouchedBy is the heartbeat that vouches for the grant, "" when its
	// own renewals keep it.
	VouchedBy string
}

// Clock is what the operator saw of the current grant on its own monotonic
// clock. After a restart every field is the time the grant was first seen:
// an unknown lease counts as freshly renewed.
type Clock struct {
	Now time.Time
	// RenewedAt is when the operator last saw a renewal confirmed: of the
	// grant's Lease, or, for a grant its heartbeat vouches for, of the
	// heartbeat.
	RenewedAt time.Time
	// WrittenAt is when the operator last saw a renewal of the grant's own
	// Lease confirmed (for a vouched grant, its refresh).
	WrittenAt time.Time
	// GrantedAt is when the operator first saw this grant.
	GrantedAt time.Time
}

// Input is everything Decide needs.
type Input struct {
	Policy     Policy
	Lease      Lease
	Clock      Clock
	Candidates []Candidate
	// HandoffRequested says that a handoff was requested and not handled
	// yet (see decideHandoff).
	HandoffRequested bool
	// Gates are what the operator holds the plan to (gates.go).
	Gates Gates
}

// Action is the next write the controller makes to the Lease.
type Action string

// Actions.
const (
	// Wait writes nothing; look again after Plan.RequeueAfter or on an event.
	Wait Action = "Wait"
	// Renew extends the current grant.
	Renew Action = "Renew"
	// Revoke stops renewing the current grant: it ends when it expires.
	Revoke Action = "Revoke"
	// Drop lets a deleted Lease go once its grant is over (its finalizer is
	// removed); the operator then re-creates it.
	Drop Action = "Drop"
	// Grant writes a fresh grant, with a new fence, to Plan.Target.
	Grant Action = "Grant"
)

// Plan is the decision for one reconcile.
type Plan struct {
	Action Action
	// Target is the pod to grant, for Grant.
	Target Candidate
	// Why explains the action in words for logs and events.
	Why string
	// Rotation marks a revoke or grant caused by maxHoldSeconds or by a
	// requested handoff.
	Rotation bool
	// Cause is why the current grant ends, for a Revoke or for a Grant that
	// replaces a grant: one of the Cause constants. Empty when no grant ends
	// (a first grant, a fresh grant after a renewal-mode change).
	Cause string
	// Handoff is the outcome of a requested handoff (HandoffStarted,
	// HandoffNotNeeded, HandoffRefused); empty when none was requested or it
	// must wait.
	Handoff string
	// HandoffNote says why a handoff was refused.
	HandoffNote string
	// Waiting is the Held condition reason while there is no holder.
	Waiting string
	// RequeueAfter is when to look again, 0 for "on the next event only".
	// A plan Waiting for capacity looks again at the turn the pace gives it.
	RequeueAfter time.Duration
	// Refusal is the grant refused for its fence, if one was: made by this
	// plan (recorded, reported, and the held grant, if any, revoked) or
	// still waited out.
	Refusal *Refusal
	// Spends says that the plan takes a grant from the first grants'
	// budget (internal/pace): a first grant admitted, or a grant that
	// replaces one.
	Spends bool
	// Behind says that the current grant expired unrenewed and its re-grant
	// goes behind the renewals of the grants still held; Deferred that
	// this plan is the one that put it there and writes nothing.
	Behind, Deferred bool
}

// Reasons for Plan.Waiting: the Held condition's reasons of the API.
const (
	WaitingNoCandidates = fencingv1alpha1.ReasonNoCandidates
	WaitingForExpiry    = fencingv1alpha1.ReasonWaitingForExpiry
	WaitingGranting     = fencingv1alpha1.ReasonGranting
	WaitingPaused       = fencingv1alpha1.ReasonPaused
	// WaitingForCapacity: a first grant waits while the operator admits
	// none (internal/pace, Gates.Closed).
	WaitingForCapacity = fencingv1alpha1.ReasonWaitingForCapacity
)

// Decide returns the next step for one FencedLease. It never grants while a
// grant that may still be in use is unexpired, unless the takeover policy is
// Immediate; it never renews a grant whose holder is not eligible or whose
// lease already expired (authority is not re-acquired silently: a lapsed
// grant is replaced by a fresh one with a new fence). The plan the Lease
// and the pods call for then passes the operator's gates, in order
// (gates.go); the controller applies what comes out and never changes it.
func Decide(in Input) Plan {
	p := decideLease(in)
	for _, g := range gates {
		p = g(in, p)
	}
	return p
}

// decideLease is the plan the Lease, the pods and the clock call for.
func decideLease(in Input) Plan {
	if in.Lease.Deleting {
		return decideDeleting(in)
	}
	if in.HandoffRequested {
		return decideHandoff(in)
	}
	return decide(in)
}

func decide(in Input) Plan {
	switch in.Lease.State {
	case StateHeld:
		return decideHeld(in)
	case StateRevoked:
		return decideRevoked(in)
	case StateReleased:
		return withCause(grantOrWait(in, "", "the holder released its grant", in.Lease.HolderUID), CauseReleased)
	case StatePending:
		return decidePending(in)
	default:
		return grantOrWait(in, "", "no grant yet")
	}
}

func decideHeld(in Input) Plan {
	p, c := in.Policy, in.Clock
	holder, found := Find(in.Candidates, in.Lease.HolderUID)
	expired := c.Now.Sub(c.RenewedAt) >= p.LeaseDuration
	switch {
	case !found:
		return loss(in, IneligibleGone)
	case holder.Terminated:
		// The kubelet proves that nothing of the holder runs: as released.
		return withCause(grantOrWait(in, "", "the holder pod terminated", in.Lease.HolderUID), CauseTerminated)
	case !holder.Eligible():
		return loss(in, holder.Ineligible)
	}
	holderRenews := renewal(in.Lease.Renewal) == RenewalHolder
	if renewal(p.Renewal) != renewal(in.Lease.Renewal) && !p.Paused {
		// The grant was made under the other renewal mode: the holder gets a
		// fresh one under this one (the same pod, so no wait for expiry).
		return Plan{Action: Grant, Target: holder, Why: "renewal mode changed to " + renewal(p.Renewal)}
	}
	if holderRenews && expired {
		// The holder stopped renewing its own grant: paused, partitioned, or
		// on a node that is gone. Its grant has expired on this clock, and,
		// renewing it itself, it stopped acting on its own clock before that.
		return loss(in, IneligibleStoppedRenewing)
	}
	maxHold := untilMaxHold(in)
	if p.MaxHold > 0 && maxHold == 0 && !p.Paused {
		if next, ok := Choose(in.Candidates, "", in.Lease.HolderUID); ok && next.UID != holder.UID {
			if p.Takeover == TakeoverImmediate {
				return Plan{Action: Grant, Target: next, Rotation: true, Cause: CauseRotation, Why: "maxHoldSeconds reached"}
			}
			return Plan{Action: Revoke, Rotation: true, Cause: CauseRotation, Why: "maxHoldSeconds reached",
				Waiting: WaitingForExpiry, RequeueAfter: untilExpiry(in)}
		}
		// Nobody to rotate to: keep the holder; a candidate becoming ready
		// triggers the next look.
	}
	vouched := vouchedHere(in)
	if expired {
		// Renewals were not confirmed for a whole lease duration: the grant
		// is over, and the holder must not keep it silently.
		if p.Paused {
			return Plan{Action: Revoke, Cause: CauseExpired, Why: "grant expired without confirmed renewal", Waiting: WaitingPaused}
		}
		return withCause(grantOrWait(in, in.Lease.HolderUID, "grant expired without confirmed renewal"), CauseExpired)
	}
	if holderRenews {
		// Not ours to renew: look again when it would expire.
		return Plan{Action: Wait, RequeueAfter: minPositive(untilExpiry(in), maxHold)}
	}
	if vouched {
		// The heartbeat renews it; its own Lease is written once every
		// refresh interval. Its expiry, were the heartbeat to stop, is
		// watched for by the heartbeat's watchdog.
		if since := c.Now.Sub(c.WrittenAt); since < p.Refresh {
			return Plan{Action: Wait, RequeueAfter: minPositive(p.Refresh-since, maxHold)}
		}
		return Plan{Action: Renew, RequeueAfter: minPositive(p.Refresh, maxHold)}
	}
	if since := c.Now.Sub(c.RenewedAt); since < p.RenewInterval {
		return Plan{Action: Wait, RequeueAfter: minPositive(p.RenewInterval-since, maxHold)}
	}
	return Plan{Action: Renew, RequeueAfter: minPositive(p.RenewInterval, maxHold)}
}

// loss handles a holder that is no longer eligible: stop renewing at once and,
// with Immediate takeover, grant the next candidate right away.
func loss(in Input, why string) Plan {
	if in.Policy.Takeover == TakeoverImmediate && !in.Policy.Paused {
		if next, ok := Choose(in.Candidates, "", in.Lease.HolderUID); ok {
			return Plan{Action: Grant, Target: next, Cause: CauseOf(why), Why: "holder lost: " + why}
		}
	}
	waiting := WaitingForExpiry
	if in.Policy.Paused {
		waiting = WaitingPaused
	}
	return Plan{Action: Revoke, Cause: CauseOf(why), Why: "holder lost: " + why, Waiting: waiting, RequeueAfter: untilExpiry(in)}
}

func decideRevoked(in Input) Plan {
	if in.Policy.Paused {
		return Plan{Action: Wait, Waiting: WaitingPaused}
	}
	if in.Policy.Takeover != TakeoverImmediate && !holderTerminated(in) {
		if left := untilExpiry(in); left > 0 {
			return Plan{Action: Wait, Waiting: WaitingForExpiry, RequeueAfter: left}
		}
	}
	// Prefer anyone but the revoked holder (it was rotated away or lost).
	return grantOrWait(in, "", "previous grant revoked", in.Lease.HolderUID)
}

func decidePending(in Input) Plan {
	if left := in.Policy.PendingGrace - in.Clock.Now.Sub(in.Clock.GrantedAt); left > 0 {
		return Plan{Action: Wait, Waiting: WaitingGranting, RequeueAfter: left}
	}
	// A grant whose outcome was never confirmed is never published: it is
	// superseded by a fresh grant with a new, higher fence.
	plan := grantOrWait(in, in.Lease.HolderUID, "superseding a grant that was never committed")
	if plan.Action != Grant || plan.Target.UID == in.Lease.HolderUID || in.Policy.Takeover == TakeoverImmediate {
		return plan
	}
	// The pending grant may have replaced a committed grant to the same pod
	// (a fresh grant after a renewal-mode change) that is still valid: any
	// other valid grant was ruled out when the pending one was written (Safe
	// waits for expiry). That grant was last renewed before the pending one
	// was written, so a lease duration after this operator first saw the
	// pending grant it has surely expired. A pod the kubelet reports
	// terminated runs nothing, and needs no wait.
	if holderTerminated(in) {
		return plan
	}
	if left := untilExpiry(in); left > 0 {
		return Plan{Action: Wait, Why: "the pending grant's pod is not eligible", Waiting: WaitingForExpiry, RequeueAfter: left}
	}
	return plan
}

func grantOrWait(in Input, current types.UID, why string, avoid ...types.UID) Plan {
	if in.Policy.Paused {
		return Plan{Action: Wait, Waiting: WaitingPaused}
	}
	next, ok := Choose(in.Candidates, current, avoid...)
	if !ok {
		return Plan{Action: Wait, Waiting: WaitingNoCandidates}
	}
	return Plan{Action: Grant, Target: next, Why: why}
}

// withCause sets the cause of a plan that ends the current grant.
func withCause(p Plan, cause string) Plan {
	if p.Action == Grant || p.Action == Revoke {
		p.Cause = cause
	}
	return p
}

// vouchedHere says whether the held grant is vouched for by this
// operator's heartbeat. A grant that names another heartbeat, or none, is
// renewed on its own Lease, which takes it over.
func vouchedHere(in Input) bool {
	return in.Policy.Vouches() && in.Lease.VouchedBy == in.Policy.Voucher && renewal(in.Lease.Renewal) == RenewalOperator
}

// renewal is a renewal mode with the default applied.
func renewal(mode string) string {
	if mode == "" {
		return RenewalOperator
	}
	return mode
}

func untilExpiry(in Input) time.Duration {
	left := in.Policy.LeaseDuration - in.Clock.Now.Sub(in.Clock.RenewedAt)
	if left < 0 {
		return 0
	}
	return left
}

// untilMaxHold is the time left before maxHold rotates the holder; 0 when
// there is no limit or it has been reached.
func untilMaxHold(in Input) time.Duration {
	if in.Policy.MaxHold <= 0 {
		return 0
	}
	left := in.Policy.MaxHold - in.Clock.Now.Sub(in.Clock.GrantedAt)
	if left < 0 {
		return 0
	}
	return left
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	case a < b:
		return a
	default:
		return b
	}
}
