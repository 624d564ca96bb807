package invariant

import "math"

// Grant is a grant of a Lease (by name; "" for a feeder that watches one
// only): its fence, the pod it went to (Holder, a UID) and At, when it
// became known, in the feeder's order (a store revision, a time in
// nanoseconds).
type Grant struct {
	Lease  string
	Fence  int64
	Holder string
	At     int64
}

// Grants tracks the grants of Leases. Committed grants, fed in the order
// the Lease committed them, are checked: each new one has a higher fence
// than every one before (GrantFenceDown), and one fence goes to one pod
// (GrantTwoHolders). Grants seen by sources whose order is not the Lease's
// (two watches that deliver independently) are recorded unchecked.
//
// The writes accepted are checked against them: a write's fence must have
// been granted to its writer (GrantedTo), and a write is stale when a grant
// with a higher fence was known when it began (Stale).
type Grants struct {
	byLease map[string][]Grant
}

// NewGrants returns a tracker with no grant.
func NewGrants() *Grants { return &Grants{byLease: map[string][]Grant{}} }

// Commit records a grant committed on its Lease and returns the rules it
// breaks. A grant committed again (a renewal) is no new grant.
func (t *Grants) Commit(g Grant) []Violation {
	var out []Violation
	if prev, ok := t.find(g.Lease, g.Fence); ok {
		if prev.Holder != g.Holder {
			out = append(out, violation(GrantTwoHolders, "fence %d%s granted to pod UID %s, but it was granted to pod UID %s before",
				g.Fence, ofLease(g.Lease), g.Holder, prev.Holder))
		}
		return out
	}
	if newest, ok := t.Newest(g.Lease, math.MaxInt64); ok && g.Fence < newest.Fence {
		out = append(out, violation(GrantFenceDown, "fence %d%s granted to pod UID %s after fence %d was granted to pod UID %s",
			g.Fence, ofLease(g.Lease), g.Holder, newest.Fence, newest.Holder))
	}
	t.byLease[g.Lease] = append(t.byLease[g.Lease], g)
	return out
}

// ofLease names the Lease in a message, if the feeder named it.
func ofLease(lease string) string {
	if lease == "" {
		return ""
	}
	return " of Lease " + lease
}

// Seen records a grant as a source showed it, unchecked. Seen again, the
// earliest time is kept.
func (t *Grants) Seen(g Grant) {
	for i, prev := range t.byLease[g.Lease] {
		if prev.Fence == g.Fence {
			t.byLease[g.Lease][i].At = min(prev.At, g.At)
			return
		}
	}
	t.byLease[g.Lease] = append(t.byLease[g.Lease], g)
}

// find returns the grant of that fence, if any.
func (t *Grants) find(lease string, fence int64) (Grant, bool) {
	for _, g := range t.byLease[lease] {
		if g.Fence == fence {
			return g, true
		}
	}
	return Grant{}, false
}

// Holder is the pod the fence of the Lease was granted to, if it was.
func (t *Grants) Holder(lease string, fence int64) (string, bool) {
	g, ok := t.find(lease, fence)
	return g.Holder, ok
}

// GrantedTo says whether the fence of the Lease was granted to the pod
// holder: a write accepted with that fence from another pod, or with a
// fence never granted, breaks it.
func (t *Grants) GrantedTo(lease string, fence int64, holder string) bool {
	h, ok := t.Holder(lease, fence)
	return ok && h == holder
}

// Newest is the grant of the Lease with the highest fence known at or
// before at.
func (t *Grants) Newest(lease string, at int64) (Grant, bool) {
	var newest Grant
	found := false
	for _, g := range t.byLease[lease] {
		if g.At <= at && (!found || g.Fence > newest.Fence) {
			newest, found = g, true
		}
	}
	return newest, found
}

// Last is the grant with the highest fence that went to the pod holder.
func (t *Grants) Last(lease, holder string) (Grant, bool) {
	var last Grant
	found := false
	for _, g := range t.byLease[lease] {
		if g.Holder == holder && (!found || g.Fence > last.Fence) {
			last, found = g, true
		}
	}
	return last, found
}

// Stale is the no-stale-write rule: a write with that fence, begun at at,
// must be refused once a grant with a higher fence is known (At no later
// than at). It returns the newest such grant when the fence is below it.
func (t *Grants) Stale(lease string, fence, at int64) (Grant, bool) {
	newest, ok := t.Newest(lease, at)
	return newest, ok && fence < newest.Fence
}
