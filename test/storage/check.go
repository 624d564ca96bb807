package storage

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fencedlease/fencedlease/internal/invariant"
)

// Attempt is one write attempt of a writer process, as testdata/writer
// records it: one JSON line each.
type Attempt struct {
	Pod string `json:"pod"`
	UID string `json:"uid"`
	// Way is "gateway" (through the fence gateway) or "pointer" (fences3).
	Way string `json:"way"`
	// Kind is put, delete (a tombstone), slow (a body paused half way),
	// alias (the key sent as another path to it: Path) or replay (a
	// fences3 operation sent again with its ID, fence and content).
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Path  string `json:"path,omitempty"`
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
	// AliasAccepted: the gateway accepted a write sent to a path alias of
	// its key (one object, one key: such a path is refused).
	AliasAccepted = "accepted through a path alias"
	// AppliedTwice: fences3 applied one operation twice (a replay must
	// answer ErrAlreadyApplied, or be refused).
	AppliedTwice = "operation applied twice"
)

// Check returns every violation in the history. Only accepted writes
// count; a write whose outcome is unknown may or may not have been
// applied and is checked by neither side. The pointer way is checked for
// order only: fences3 does not know who holds a grant.
func Check(history []Attempt, grants []Grant) []Violation {
	var out []Violation
	byKey := map[string][]Attempt{}
	applied := map[string]Attempt{}
	for _, a := range history {
		if a.Result != "accepted" {
			continue
		}
		switch {
		case a.Kind == "alias":
			out = append(out, Violation{AliasAccepted, fmt.Sprintf("%s (pod %s) wrote %q, an alias of %s, with fence %d", a.Op, a.Pod, a.Path, a.Key, a.Fence)})
			continue
		case a.Code == "AlreadyApplied":
			// Nothing was written: not a write in the key's order.
			continue
		case a.Way == "pointer":
			if first, ok := applied[a.Op]; ok {
				out = append(out, Violation{AppliedTwice, fmt.Sprintf("%s applied with fence %d and again with fence %d (%s)", a.Op, first.Fence, a.Fence, a.Kind)})
			}
			applied[a.Op] = a
		}
		byKey[a.Way+"/"+a.Key] = append(byKey[a.Way+"/"+a.Key], a)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, checkOrder(k, byKey[k])...)
	}
	return append(out, checkGrants(history, grants)...)
}

// checkGrants checks the grants, committed in the order the Lease's watch
// saw them (internal/invariant's Grants: fences grow, one pod a fence), and
// every accepted gateway write against them: its fence was granted to the
// writing pod (Grants.GrantedTo), and it began before the watch saw that
// grant end. The storage chaos has one FencedLease: its Lease is "".
func checkGrants(history []Attempt, grants []Grant) []Violation {
	var out []Violation
	committed := invariant.NewGrants()
	byFence := map[int64]Grant{}
	for _, g := range grants {
		for _, v := range committed.Commit(invariant.Grant{Fence: g.Fence, Holder: g.HolderUID, At: g.Seen.UnixNano()}) {
			out = append(out, Violation{string(v.Rule), v.Detail})
		}
		if _, ok := byFence[g.Fence]; !ok {
			byFence[g.Fence] = g
		}
	}
	for _, a := range history {
		if a.Result != "accepted" || a.Way != "gateway" {
			continue
		}
		g := byFence[a.Fence]
		switch {
		case !committed.GrantedTo("", a.Fence, a.UID):
			out = append(out, Violation{NotHolder, fmt.Sprintf("%s (pod %s, UID %s) wrote %s with fence %d, granted to UID %q", a.Op, a.Pod, a.UID, a.Key, a.Fence, g.HolderUID)})
		case !g.Ended.IsZero() && g.Ended.UnixNano() < a.Call:
			out = append(out, Violation{AfterGrantEnded, fmt.Sprintf("%s (pod %s) wrote %s with fence %d at %s, %s after the grant ended",
				a.Op, a.Pod, a.Key, a.Fence, time.Unix(0, a.Call).Format(time.RFC3339Nano), time.Duration(a.Call-g.Ended.UnixNano()))})
		}
	}
	return out
}

// checkOrder checks one key (internal/invariant's Order): no accepted write
// has a lower fence than an accepted write that returned before it was
// called. Writes whose calls overlap may land in either order.
func checkOrder(key string, accepted []Attempt) []Violation {
	byReturn := slices.Clone(accepted)
	slices.SortFunc(byReturn, func(a, b Attempt) int { return cmp.Compare(a.Return, b.Return) })
	byCall := slices.Clone(accepted)
	slices.SortFunc(byCall, func(a, b Attempt) int { return cmp.Compare(a.Call, b.Call) })
	order := invariant.NewOrder[Attempt]()
	var out []Violation
	i := 0
	for _, b := range byCall {
		for ; i < len(byReturn) && byReturn[i].Return < b.Call; i++ {
			order.Record(key, invariant.Write[Attempt]{Fence: byReturn[i].Fence, Of: byReturn[i]})
		}
		if high, stale := order.Check(key, invariant.Write[Attempt]{Fence: b.Fence, Of: b}); stale {
			done := high.Of
			out = append(out, Violation{FenceWentBack, fmt.Sprintf("%s: %s (pod %s) accepted with fence %d after %s (pod %s) was accepted with fence %d",
				key, b.Op, b.Pod, b.Fence, done.Op, done.Pod, done.Fence)})
		}
	}
	return out
}
