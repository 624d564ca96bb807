package holder

import (
	"errors"
	"fmt"
	"time"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// RegressionRetry is how long grants wait after one was refused for a fence
// regression. A grant below the floor stays pending, and its write wakes the
// FencedLease again through the Lease's watch: without the wait the tries
// would follow one another as fast as the reconciles go, a Lease write and
// an Event each, until the store's revision passed the floor.
const RegressionRetry = 10 * time.Second

// BehindRenewals is how soon the re-grant of a grant found expired is
// looked at again, behind every renewal that is due (the controller queues
// it at priority 0).
const BehindRenewals = time.Millisecond

// Gates are what the operator, rather than the Lease and the pods, holds a
// plan to: the fence floor, an earlier refusal, its admission of first
// grants, and what it already did about an expiry. Their zero value holds
// nothing back.
type Gates struct {
	// LeaseVersion is the resourceVersion of the Lease as read and Floor the
	// highest fence published for the FencedLease (the fence floor); an
	// empty LeaseVersion is not checked against the floor.
	LeaseVersion string
	Floor        int64
	// Refused is an earlier refusal that still holds grants back, for
	// RefusedFor more.
	Refused    *Refusal
	RefusedFor time.Duration
	// Closed says why first grants are not admitted now; "" when they are.
	Closed string
	// DeferExpiry says that an expiry of the current grant found now puts
	// its re-grant behind the renewals: true unless that was done already
	// for this grant.
	DeferExpiry bool
}

// Refusal is a grant refused for its fence: the Lease's version is not above
// the fence floor (FenceRegression) or not a number at all
// (FenceUnavailable).
type Refusal struct {
	Reason string
	Err    error
	// Made says that this plan makes the refusal, which is then recorded
	// and reported; false while a grant waits out an earlier one.
	Made bool
}

// Message is the Degraded condition's message of the refusal.
func (r *Refusal) Message() string {
	if r.Reason == fencingv1alpha1.ReasonFenceRegression {
		return r.Err.Error() + "; no grant is made until it is"
	}
	return r.Err.Error()
}

// CheckFloor refuses a resourceVersion that is not greater than the fence
// floor, or that is no number; nil when rv may carry a fence.
func CheckFloor(rv string, floor int64) *Refusal {
	_, err := CheckIncreases(rv, floor)
	var regression *RegressionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &regression):
		return &Refusal{Reason: fencingv1alpha1.ReasonFenceRegression, Err: err, Made: true}
	default:
		return &Refusal{Reason: fencingv1alpha1.ReasonFenceUnavailable, Err: err, Made: true}
	}
}

// gate is one link of the chain: it may hold back or turn the plan.
type gate func(in Input, p Plan) Plan

// gates is the chain, in order. A held grant brought back from the past
// ends first, whatever else is asked; a first grant that is not admitted
// waits before anything else is looked at; then an expiry goes behind the
// renewals once; then a grant over a held one checks the floor before it
// writes; then an earlier refusal holds grants back.
var gates = []gate{restoredGrant, admission, behindRenewals, floorBeforeWrite, stillRefused}

// restoredGrant ends a held grant that the API server's storage brought
// back from the past (an etcd restore): its Lease's version is not above a
// fence already published. It was checked against the floor when it was
// made, long ago, and with the heartbeat vouching for it nothing would write
// its Lease again for minutes: it would stay held, its holder's writes
// refused by every destination that saw the newer fence. It is revoked at
// once, and no grant is made until the store's revision passes the floor.
func restoredGrant(in Input, p Plan) Plan {
	if in.Lease.State != StateHeld || in.Gates.LeaseVersion == "" {
		return p
	}
	refusal := CheckFloor(in.Gates.LeaseVersion, in.Gates.Floor)
	if refusal == nil || refusal.Reason != fencingv1alpha1.ReasonFenceRegression {
		return p
	}
	return Plan{Action: Revoke, Cause: CauseRegression, Refusal: refusal, RequeueAfter: RegressionRetry,
		Why: fmt.Sprintf("the Lease's version %s is not above fence %d, already published: the store went back in time", in.Gates.LeaseVersion, in.Gates.Floor)}
}

// admission lets a FencedLease's first grant wait while the operator admits
// none (internal/pace): it would add renewals that could not be made on
// time. It looks again at its turn, which the controller asks the pace for.
// A takeover or re-grant goes ahead, as it replaces a grant, but spends
// from the first grants' budget.
func admission(in Input, p Plan) Plan {
	if p.Action != Grant {
		return p
	}
	if in.Lease.State != StateFree {
		p.Spends = true
		return p
	}
	if in.Gates.Closed != "" {
		return Plan{Action: Wait, Waiting: WaitingForCapacity, Why: in.Gates.Closed}
	}
	p.Spends = true
	return p
}

// behindRenewals puts the re-grant of a grant found expired unrenewed
// behind the renewals of the grants still held, once: the plan that finds
// the expiry writes nothing (Deferred), and the next one, queued behind
// them, makes the re-grant. An operator past its capacity that re-granted
// at once never recovered from a slow moment of its API server: each
// re-grant is the writes of a grant, they made more renewals late, and
// those expired in turn (design.md, "Renewals under load").
func behindRenewals(in Input, p Plan) Plan {
	if p.Cause != CauseExpired {
		return p
	}
	p.Behind = true
	if !in.Gates.DeferExpiry {
		return p
	}
	return Plan{Action: Wait, Behind: true, Deferred: true, Spends: p.Spends, RequeueAfter: BehindRenewals,
		Why: "grant expired unrenewed; re-granted behind the renewals of the grants still held"}
}

// floorBeforeWrite checks, before a grant replaces a held one, that the
// Lease's version is a fence at all: a store whose versions are not numbers
// cannot fence, and the held grant ends as the plan asked, by a revocation,
// without a grant. (A version below the floor was ended by restoredGrant.)
// Once no grant is held, only the check after the write counts: the
// Lease's own version moves on only when it is written.
func floorBeforeWrite(in Input, p Plan) Plan {
	if p.Action != Grant || in.Lease.State != StateHeld || in.Gates.LeaseVersion == "" {
		return p
	}
	refusal := CheckFloor(in.Gates.LeaseVersion, in.Gates.Floor)
	if refusal == nil {
		return p
	}
	p.Action, p.Refusal, p.RequeueAfter = Revoke, refusal, RegressionRetry
	return p
}

// stillRefused holds a grant back while an earlier refusal for the fence
// is recent (RegressionRetry). A handoff it would have started waits with
// it: the request is handled by the grant that follows.
func stillRefused(in Input, p Plan) Plan {
	if p.Action != Grant || in.Gates.RefusedFor <= 0 || in.Gates.Refused == nil {
		return p
	}
	refusal := *in.Gates.Refused
	refusal.Made = false
	p.Action, p.Refusal, p.RequeueAfter = Wait, &refusal, in.Gates.RefusedFor
	p.Handoff, p.HandoffNote = "", ""
	return p
}
