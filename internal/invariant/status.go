package invariant

// Status is a FencedLease's status as one write left it: its fence, its
// count of transitions, and the holder it names (HolderUID "" for none).
// UID is the FencedLease object's: one created again under the same name
// starts a status of its own.
type Status struct {
	FencedLease string
	UID         string
	Fence       int64
	Transitions int32
	HolderUID   string
	HolderName  string
}

// Statuses tracks the statuses of FencedLeases, in the order they were
// written, and checks that none moves back: its fence (StatusFenceBack) and
// its transitions (StatusTransitionsBack) never decrease, and a grant it
// recorded as ended (another holder or fence named after it) is never
// named again (StatusEndedAgain).
type Statuses struct {
	byUID map[string]*statusRecord
}

type statusRecord struct {
	fence       int64
	transitions int32
	holder      string
	ended       map[int64]bool
}

// NewStatuses returns a tracker that has seen no status.
func NewStatuses() *Statuses { return &Statuses{byUID: map[string]*statusRecord{}} }

// Observe records a status and returns the rule it breaks, if any: one at
// most, the first of fence, transitions, ended grant.
func (t *Statuses) Observe(st Status) []Violation {
	rec := t.byUID[st.UID]
	if rec == nil {
		rec = &statusRecord{ended: map[int64]bool{}}
		t.byUID[st.UID] = rec
	}
	var out []Violation
	switch {
	case st.Fence < rec.fence:
		out = append(out, violation(StatusFenceBack, "status of FencedLease %s went back from fence %d to %d", st.FencedLease, rec.fence, st.Fence))
	case st.Transitions < rec.transitions:
		out = append(out, violation(StatusTransitionsBack, "status of FencedLease %s went back from %d transitions to %d",
			st.FencedLease, rec.transitions, st.Transitions))
	case st.HolderUID != "" && rec.ended[st.Fence]:
		out = append(out, violation(StatusEndedAgain, "status of FencedLease %s names holder %s with fence %d again, after it recorded the end of that grant",
			st.FencedLease, st.HolderName, st.Fence))
	}
	if rec.holder != "" && (st.HolderUID != rec.holder || st.Fence != rec.fence) {
		rec.ended[rec.fence] = true
	}
	rec.fence, rec.transitions, rec.holder = max(rec.fence, st.Fence), max(rec.transitions, st.Transitions), st.HolderUID
	return out
}
