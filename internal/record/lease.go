package record

import "strconv"

// Lease is the grant a FencedLease's Lease records in its annotations, with
// the pod its spec.holderIdentity names.
type Lease struct {
	// State is StatePending (written, not committed), StateHeld
	// (committed), StateRevoked (no longer renewed; over once expired),
	// StateReleased (its holder said that it stopped), or "" (no grant yet).
	State string
	// HolderUID is the UID of the pod the grant names (a pod re-created
	// with the same name is another pod).
	HolderUID string
	// Fence is the fence of the last committed grant; 0 when none was, or
	// when the annotation does not parse.
	Fence int64
	// Renewal is who renews the grant: RenewalOperator or RenewalHolder.
	Renewal string
	// RenewInterval is how often, in seconds, a holder that renews its own
	// grant renews it; 0 when unset.
	RenewInterval int
	// Handoff is the handoff request that the grant's revoke, or the grant
	// itself, carried out.
	Handoff string
	// VouchedBy is the heartbeat Lease (namespace/name) whose renewals
	// renew the grant, with renewal Operator; "" when the grant's own
	// renewals do.
	VouchedBy string
	// LeaseDuration is, on a vouched grant, the FencedLease's lease
	// duration in seconds (the Lease's own spec covers the refresh interval
	// too); 0 when unset.
	LeaseDuration int
}

// ParseLease reads the record from a Lease's annotations.
func ParseLease(annotations map[string]string) Lease {
	return Lease{
		State:         annotations[LeaseState],
		HolderUID:     annotations[LeaseHolderUID],
		Fence:         FenceOf(annotations[AnnotationFence]),
		Renewal:       annotations[LeaseRenewal],
		RenewInterval: seconds(annotations[LeaseRenewInterval]),
		Handoff:       annotations[LeaseHandoff],
		VouchedBy:     annotations[LeaseVouchedBy],
		LeaseDuration: seconds(annotations[LeaseDuration]),
	}
}

// seconds reads a count of seconds; anything that does not parse, or is
// negative, counts as 0.
func seconds(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Apply writes the record into a Lease's annotations, which must not be
// nil: every field that is set, and the key of every field that is not
// removed, so the annotations then say exactly the record. Keys of no
// field are left alone. What does not parse reads as unset (ParseLease),
// so a record read and applied reads the same as before, and a writer
// never sets or clears one of these keys by hand.
func (l Lease) Apply(annotations map[string]string) {
	set := func(k, v string) {
		if v == "" {
			delete(annotations, k)
			return
		}
		annotations[k] = v
	}
	count := func(n int64) string {
		if n <= 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	set(LeaseState, l.State)
	set(LeaseHolderUID, l.HolderUID)
	set(AnnotationFence, count(l.Fence))
	set(LeaseRenewal, l.Renewal)
	set(LeaseRenewInterval, count(int64(l.RenewInterval)))
	set(LeaseHandoff, l.Handoff)
	set(LeaseVouchedBy, l.VouchedBy)
	set(LeaseDuration, count(int64(l.LeaseDuration)))
}

// Vouched says whether a heartbeat renews the grant (renewal Operator).
func (l Lease) Vouched() bool { return l.VouchedBy != "" && !l.HolderRenews() }

// Held says whether the record holds a committed grant.
func (l Lease) Held() bool { return l.State == StateHeld && l.Fence > 0 && l.HolderUID != "" }

// Holds says whether the record holds a committed grant for the pod of uid.
func (l Lease) Holds(uid string) bool { return l.Held() && l.HolderUID == uid }

// HolderRenews says whether the grant is renewed by its holder.
func (l Lease) HolderRenews() bool { return l.Renewal == RenewalHolder }
