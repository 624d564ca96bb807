package fencedlease

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// observation is what the operator saw of the current grant of one
// FencedLease on its own monotonic clock (part of its memory). Expiry is
// judged from here, never by comparing wall clocks written by other
// machines. A grant the operator has not seen before (after a restart, or
// written by another replica) counts as freshly renewed.
type observation struct {
	grant     string // identifies one grant: transitions and holder UID
	rv        string // the newest Lease resourceVersion seen; older reads are ignored
	renewTime string // the Lease's renewTime when last seen
	fence     int64  // the fence the Lease recorded when last seen
	renewedAt time.Time
	grantedAt time.Time
	// maxFence is the highest fence seen for this FencedLease: it survives
	// a storage restore that rewinds every stored record.
	maxFence int64
	// inherited is set while the grant is one this process has not written
	// or renewed itself: seen first after a restart, or written by another
	// replica.
	inherited bool
	// dropped is the deleted Lease this process let go once its grant was
	// over (decideDeleting), until a newer Lease is seen: the record of the
	// Lease it re-creates.
	dropped *coordinationv1.Lease
	// credit is, once a vouched grant has ended, the latest time its
	// heartbeat may have renewed it (creditAfterEnd); creditFor the grant
	// it was worked out for.
	credit    time.Time
	creditFor string
}

func grantKey(l *coordinationv1.Lease) string {
	var transitions int32
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	return fmt.Sprintf("%d/%s", transitions, record.ParseLease(l.Annotations).HolderUID)
}

func renewTimeOf(l *coordinationv1.Lease) string {
	if l.Spec.RenewTime == nil {
		return ""
	}
	return l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
}

// observe records the Lease as seen at now and returns the clock of its
// grant: a function of what was seen before, the Lease and the time. A
// changed renewTime on the same grant is a renewal confirmed by someone
// (another replica, the holder, or this one before a lost response); renewed
// reports one. A risen fence on the same grant is its commit, seen for the
// first time: the holder may act from the commit on, whenever it was
// applied, and a commit's renewTime is when it was computed, which can be
// long before (a write that sat in flight), or the renewTime already seen.
// So the commit restarts the grant's clock now, when it is first seen,
// whatever its renewTime says; renewed stays false for it (renewed counts
// the renewals others wrote, and the commit is the grant's own write).
func (obs *observation) observe(l *coordinationv1.Lease, fence int64, now time.Time) (c holder.Clock, renewed bool) {
	switch g := grantKey(l); {
	case !record.MaybeNewer(l.ResourceVersion, obs.rv):
		// A read older than one already seen (a lagging cache) says nothing new.
	case obs.grant != g:
		obs.grant, obs.renewTime, obs.fence, obs.renewedAt, obs.grantedAt = g, renewTimeOf(l), fenceAnnotation(l.Annotations), now, now
		obs.inherited = true
	case renewTimeOf(l) != obs.renewTime:
		obs.renewTime, obs.fence, obs.renewedAt = renewTimeOf(l), max(obs.fence, fenceAnnotation(l.Annotations)), now
		renewed = true
	case fenceAnnotation(l.Annotations) > obs.fence:
		obs.fence, obs.renewedAt = fenceAnnotation(l.Annotations), now
	}
	if record.MaybeNewer(l.ResourceVersion, obs.rv) {
		obs.rv, obs.dropped = l.ResourceVersion, nil
	}
	obs.maxFence = max(obs.maxFence, fence)
	return holder.Clock{Now: now, RenewedAt: obs.renewedAt, WrittenAt: obs.renewedAt, GrantedAt: obs.grantedAt}, renewed
}

// endCredit returns the credit worked out for the ended grant whose Lease
// is l, if it was.
func (obs *observation) endCredit(l *coordinationv1.Lease) (time.Time, bool) {
	if obs.creditFor != grantKey(l) {
		return time.Time{}, false
	}
	return obs.credit, true
}

// setEndCredit records the credit of the ended grant whose Lease is l.
func (obs *observation) setEndCredit(l *coordinationv1.Lease, credit time.Time) {
	obs.credit, obs.creditFor = credit, grantKey(l)
}

// heldFor is how long the current grant has lasted, at now, since the
// operator first saw it.
func (obs *observation) heldFor(now time.Time) time.Duration {
	if obs.grantedAt.IsZero() {
		return 0
	}
	return now.Sub(obs.grantedAt)
}

// confirmed records a write of this operator to the Lease that the API
// server confirmed at now: a renewal, or a new grant. now is taken after the
// response, which errs on the side of a later expiry.
func (obs *observation) confirmed(l *coordinationv1.Lease, fence int64, newGrant bool, now time.Time) {
	if newGrant || obs.grant != grantKey(l) {
		obs.grant, obs.grantedAt = grantKey(l), now
	}
	obs.renewTime, obs.fence, obs.renewedAt, obs.rv = renewTimeOf(l), fenceAnnotation(l.Annotations), now, l.ResourceVersion
	obs.inherited = false
	obs.maxFence = max(obs.maxFence, fence)
}

// letGo records that this process let go of a deleted Lease whose grant
// was over; l is the Lease as last written.
func (obs *observation) letGo(l *coordinationv1.Lease) {
	obs.dropped = l.DeepCopy()
	if record.MaybeNewer(l.ResourceVersion, obs.rv) {
		obs.rv = l.ResourceVersion
	}
}

// over returns the Lease this process let go of once its grant was over, if
// no newer Lease has been seen since, and forgets it: a Lease re-created
// from it needs no wait for a grant that may still be in use.
func (obs *observation) over() *coordinationv1.Lease {
	l := obs.dropped
	obs.dropped = nil
	return l
}
