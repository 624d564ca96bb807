package holder

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// Choose picks the pod that should hold the lease among the eligible
// candidates, or returns false when none is eligible.
//
// The choice is deterministic: keep the current holder while it is eligible
// (no flapping), otherwise the candidate ready the longest, then by name.
// Candidates whose UID is in avoid are taken only when nobody else is
// eligible (the holder just rotated away, for instance).
func Choose(cands []Candidate, current types.UID, avoid ...types.UID) (Candidate, bool) {
	if current != "" {
		for _, c := range cands {
			if c.UID == current && c.Eligible() && !contains(avoid, c.UID) {
				return c, true
			}
		}
	}
	var preferred, fallback []Candidate
	for _, c := range cands {
		if !c.Eligible() {
			continue
		}
		if contains(avoid, c.UID) {
			fallback = append(fallback, c)
		} else {
			preferred = append(preferred, c)
		}
	}
	for _, set := range [][]Candidate{preferred, fallback} {
		if len(set) == 0 {
			continue
		}
		sort.SliceStable(set, func(i, j int) bool { return longestReadyFirst(set[i], set[j]) })
		return set[0], true
	}
	return Candidate{}, false
}

func longestReadyFirst(a, b Candidate) bool {
	if !a.ReadySince.Equal(b.ReadySince) {
		return a.ReadySince.Before(b.ReadySince)
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.UID < b.UID
}

func contains(uids []types.UID, uid types.UID) bool {
	for _, u := range uids {
		if u == uid && uid != "" {
			return true
		}
	}
	return false
}

// CountEligible returns how many candidates may hold the lease.
func CountEligible(cands []Candidate) int {
	n := 0
	for _, c := range cands {
		if c.Eligible() {
			n++
		}
	}
	return n
}

// Find returns the candidate with the given UID.
func Find(cands []Candidate, uid types.UID) (Candidate, bool) {
	for _, c := range cands {
		if uid != "" && c.UID == uid {
			return c, true
		}
	}
	return Candidate{}, false
}
