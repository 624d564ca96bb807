package storage

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Attempt is one write attempt of a writer process, as testdata/writer
// records it: one JSON line each.
type Attempt struct {
	Pod string `json:"pod"`
	UID string `json:"uid"`
	// Way is "gateway" (through the fence gateway) or "pointer" (fences3).
	Way   string `json:"way"`
	Key   string `json:"key"`
	Op    string `json:"op"`
	Fence int64  `json:"fence"`
	// Holder is what the writer believed when it chose the fence.
	Holder bool `json:"holder"`
	// Call and Return are Unix nanoseconds around the write.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// Result is accepted, rejected, failed (not applied) or unknown.
	Result  string `json:"result"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Grant is a committed grant of the FencedLease as a watch of its Lease saw
// it: from the first version that showed it held to the first that did not.
type Grant struct {
	Fence     int64
	HolderUID string
	// Seen is when the watch saw it committed; Ended when the watch saw
	// the Lease leave it (zero while it lasts). Both are no earlier than
	// the API server's commit.
	Seen, Ended time.Time
}

// Violation is a broken invariant, with the attempts that show it.
type Violation struct {
	Kind   string
	Detail string
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// Violation kinds.
const (
	// FenceWentBack: an accepted write with a lower fence began after an
	// accepted write with a higher fence to the same key had returned
	// (invariants 3 and 9: per key, an accepted fence never goes back).
	FenceWentBack = "fence went back"
	// NotHolder: the gateway accepted a write whose fence was never
	// granted to the writing pod.
	NotHolder = "accepted from a pod that did not hold that fence"
	// AfterGrantEnded: the gateway accepted a write that began after the
	// watch had seen the Lease leave that grant (invariant 4: the gateway
	// reads the Lease on every write, so it cannot miss a newer grant that
	// was committed before the write began).
	AfterGrantEnded = "accepted after its grant had ended"
)

// Check returns every violation in the history. Only accepted writes
// count; a write whose outcome is unknown may or may not have been
// applied and is checked by neither side. The pointer way is checked for
// order only: fences3 does not know who holds a grant.
func Check(history []Attempt, grants []Grant) []Violation {
	var out []Violation
	byKey := map[string][]Attempt{}
	for _, a := range history {
		if a.Result == "accepted" {
			byKey[a.Way+"/"+a.Key] = append(byKey[a.Way+"/"+a.Key], a)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, checkOrder(k, byKey[k])...)
	}
	byFence := map[int64]Grant{}
	for _, g := range grants {
		byFence[g.Fence] = g
	}
	for _, a := range history {
		if a.Result != "accepted" || a.Way != "gateway" {
			continue
		}
		g, ok := byFence[a.Fence]
		switch {
		case !ok || g.HolderUID != a.UID:
			out = append(out, Violation{NotHolder, fmt.Sprintf("%s (pod %s, UID %s) wrote %s with fence %d, granted to UID %q", a.Op, a.Pod, a.UID, a.Key, a.Fence, g.HolderUID)})
		case !g.Ended.IsZero() && g.Ended.UnixNano() < a.Call:
			out = append(out, Violation{AfterGrantEnded, fmt.Sprintf("%s (pod %s) wrote %s with fence %d at %s, %s after the grant ended",
				a.Op, a.Pod, a.Key, a.Fence, time.Unix(0, a.Call).Format(time.RFC3339Nano), time.Duration(a.Call-g.Ended.UnixNano()))})
		}
	}
	return out
}

// checkOrder checks one key: no accepted write has a lower fence than an
// accepted write that returned before it was called.
func checkOrder(key string, accepted []Attempt) []Violation {
	byReturn := slices.Clone(accepted)
	slices.SortFunc(byReturn, func(a, b Attempt) int { return cmp.Compare(a.Return, b.Return) })
	byCall := slices.Clone(accepted)
	slices.SortFunc(byCall, func(a, b Attempt) int { return cmp.Compare(a.Call, b.Call) })
	var out []Violation
	var maxDone *Attempt
	i := 0
	for _, b := range byCall {
		for i < len(byReturn) && byReturn[i].Return < b.Call {
			if maxDone == nil || byReturn[i].Fence > maxDone.Fence {
				maxDone = &byReturn[i]
			}
			i++
		}
		if maxDone != nil && b.Fence < maxDone.Fence {
			out = append(out, Violation{FenceWentBack, fmt.Sprintf("%s: %s (pod %s) accepted with fence %d after %s (pod %s) was accepted with fence %d",
				key, b.Op, b.Pod, b.Fence, maxDone.Op, maxDone.Pod, maxDone.Fence)})
		}
	}
	return out
}
