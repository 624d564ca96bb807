//go:build chaos

package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/fencedlease/fencedlease/internal/invariant"
)

// CheckOptions tune the checks of a history.
type CheckOptions struct {
	// Window is how long after a holding is seen to end (or a newer grant is
	// seen) a write of the old holder may still be admitted: admission is not
	// a transaction with the FencedLease (design.md, invariant 4), the
	// webhook decides from an informer cache, and a watch delivers an event a
	// moment after the change. A write that falls in the window is allowed
	// and counted (Result.InWindow); one after it is a violation.
	Window time.Duration
	// LinearizabilityTimeout bounds porcupine; 0 means no bound.
	LinearizabilityTimeout time.Duration
	// Visualization is where porcupine's HTML goes when it finds a
	// violation.
	Visualization string
}

// Result is what the checks found.
type Result struct {
	Violations []string
	// Notes are findings that break no invariant but deserve a look.
	Notes []string
	// InWindow counts accepted writes that only the admission window covers;
	// MaxLateness is how far past a holding's end the latest of them came.
	InWindow    int
	MaxLateness time.Duration
	// StatusOnly counts accepted writes from a pod that was no longer
	// published as holder but that the status (which the webhook trusts)
	// still named.
	StatusOnly int
	// UnknownApplied and UnknownLost split the writes of unknown outcome by
	// whether the object's watch shows them applied.
	UnknownApplied, UnknownLost int
	// MinBeliefGap is the shortest time between the end of a renewal Holder
	// process's belief and the start of the next belief of the lease (-1
	// when there was no such handoff): how close the run came to two pods
	// believing at once.
	MinBeliefGap time.Duration
}

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Check runs every check of the history but the holder checker's, which
// watches the publications itself (testenv.WatchHolders).
func Check(h *History, o CheckOptions) (*Result, error) {
	r := &Result{MinBeliefGap: -1}
	checkAuthority(h, o, r)
	checkNewerGrant(h, o, r)
	checkShardGrants(h, r)
	checkApplyOrder(h, r)
	checkBeliefs(h, r)
	checkReleases(h, r)
	checkStatusAttempts(h, r)
	msg, err := checkLinearizable(h, o.LinearizabilityTimeout, o.Visualization)
	if err != nil {
		return nil, err
	}
	if msg != "" {
		r.violate("%s", msg)
	}
	return r, nil
}

// checkAuthority: every accepted write comes from a pod that held that fence
// of that lease at some point of the write's call interval: published to the
// pod (as the pod watch or the process's own reads showed it), or, up to the
// window after the publication ended, still about to be seen ended by the
// webhook. A write that only the status covers (the pod was already demoted,
// the status still named it: the operator demotes before it records the end
// of a grant) is legal for the webhook, which trusts the status; it is counted
// and noted, not a violation.
func checkAuthority(h *History, o CheckOptions, r *Result) {
	type key struct {
		lease, uid string
		fence      int64
	}
	byKey := map[key][]Holding{}
	for _, hd := range h.Holdings {
		k := key{hd.Lease, string(hd.PodUID), hd.Fence}
		byKey[k] = append(byKey[k], hd)
	}
	// A belief of a renewal Holder process is evidence like its own read of
	// its pod: its Session believes only after its own compare-and-swap
	// renewal of the Lease, on a version that names the pod held with that
	// fence, was accepted by the API server; it ends at the latest at the
	// grant's deadline. (The belief check below keeps beliefs honest.)
	for _, b := range h.Beliefs {
		k := key{b.Lease, string(b.PodUID), b.Fence}
		byKey[k] = append(byKey[k], Holding{Lease: b.Lease, Pod: b.Pod, PodUID: b.PodUID, Fence: b.Fence, From: b.From, To: b.To, Via: ViaRead})
	}
	for _, a := range h.Attempts {
		if a.Outcome != Accepted {
			continue
		}
		published, inWindow, status := false, false, false
		lateness := o.Window
		for _, hd := range byKey[key{a.Lease, string(a.PodUID), a.Fence}] {
			if hd.From > a.Return || (hd.To != Open && hd.To+o.Window < a.Call) {
				continue
			}
			switch {
			case hd.Via == ViaStatus:
				status = true
			case hd.To >= a.Call:
				published = true
			default:
				inWindow, lateness = true, min(lateness, a.Call-hd.To)
			}
		}
		switch {
		case published:
		case inWindow:
			r.InWindow++
			r.MaxLateness = max(r.MaxLateness, lateness)
		case status:
			r.StatusOnly++
			r.Notes = append(r.Notes, fmt.Sprintf("write #%d by %s with fence %d to %s accepted during [%s, %s] after the pod was demoted; the status still named it%s",
				a.ID, a.Process, a.Fence, a.Object, a.Call, a.Return, holdersNear(h, a)))
		default:
			r.violate("write #%d by %s (pod %s) with fence %d to %s accepted during [%s, %s], but the pod did not hold fence %d of %s then%s",
				a.ID, a.Process, a.Pod, a.Fence, a.Object, a.Call, a.Return, a.Fence, a.Lease, holdersNear(h, a))
		}
	}
}

// checkNewerGrant: once a newer fence of the lease has been seen (published
// to a pod or recorded in the status), no write with an older fence is
// accepted after the window (internal/invariant's Grants.Stale). The pod
// and status watches deliver independently, so the grants are recorded as
// seen, not checked for their order (the holder checker checks the
// publications').
func checkNewerGrant(h *History, o CheckOptions, r *Result) {
	grants := invariant.NewGrants()
	for _, hd := range h.Holdings {
		if hd.Via != ViaRead {
			grants.Seen(invariant.Grant{Lease: hd.Lease, Fence: hd.Fence, Holder: string(hd.PodUID), At: int64(hd.From)})
		}
	}
	for _, a := range h.Attempts {
		if a.Outcome != Accepted {
			continue
		}
		if g, stale := grants.Stale(a.Lease, a.Fence, int64(a.Call-o.Window)); stale {
			at := time.Duration(g.At)
			r.violate("write #%d by %s with fence %d to %s accepted at [%s, %s], but fence %d of %s was granted at %s (%s before the call)",
				a.ID, a.Process, a.Fence, a.Object, a.Call, a.Return, g.Fence, a.Lease, at, a.Call-at)
		}
	}
}

// checkApplyOrder checks the objects' versions as their watches delivered
// them, in the order the API server applied the writes: fences never go
// back, below the highest one before (internal/invariant's Order);
// every version is the value of a write that was accepted or of unknown
// outcome (a rejected write was never applied); every accepted write is
// among them (unless the watch had a gap).
func checkApplyOrder(h *History, r *Result) {
	type key struct{ object, value string }
	byValue := map[key]*Attempt{}
	for i := range h.Attempts {
		a := &h.Attempts[i]
		byValue[key{a.Object, a.Value}] = a
	}
	applied := map[int]bool{}
	objects := make([]string, 0, len(h.Versions))
	for o := range h.Versions {
		objects = append(objects, o)
	}
	sort.Strings(objects)
	order := invariant.NewOrder[Version]()
	for _, object := range objects {
		for _, v := range h.Versions[object] {
			if high, stale := order.Accept(object, invariant.Write[Version]{Fence: v.Fence, Of: v}); stale {
				prev := high.Of
				r.violate("%s went from fence %d (%q, resourceVersion %s) to fence %d (%q, resourceVersion %s)",
					object, prev.Fence, prev.Value, prev.ResourceVersion, v.Fence, v.Value, v.ResourceVersion)
			}
			if v.Value == "" {
				continue // as created
			}
			a := byValue[key{object, v.Value}]
			switch {
			case a == nil:
				r.violate("%s holds %q (fence %d), which no recorded write wrote", object, v.Value, v.Fence)
			case a.Fence != v.Fence:
				r.violate("%s holds %q with fence %d, but write #%d presented fence %d", object, v.Value, v.Fence, a.ID, a.Fence)
			case a.Outcome == Rejected:
				r.violate("write #%d by %s to %s was rejected (%s) and yet applied: %q with fence %d", a.ID, a.Process, object, a.Reason, v.Value, v.Fence)
			}
			if a != nil {
				applied[a.ID] = true
			}
		}
	}
	for _, a := range h.Attempts {
		switch {
		case a.Outcome == Accepted && !applied[a.ID] && !h.Gaps[a.Object] && !h.Gaps["*"]:
			r.violate("write #%d by %s to %s was accepted (%q, fence %d) but no watch event shows it applied", a.ID, a.Process, a.Object, a.Value, a.Fence)
		case a.Outcome == Unknown && applied[a.ID]:
			r.UnknownApplied++
		case a.Outcome == Unknown:
			r.UnknownLost++
		}
	}
}

// checkBeliefs: no two holder processes believe they hold the same lease at
// once (the holder's own view is bounded: DESIGN invariant 8, with takeover
// Safe). Beliefs of different grants (another pod, or the same pod's other
// fence) must not overlap at all: no tolerance. Every process runs in this
// test binary, and every From and To is on the one monotonic clock of the
// recorder, so there is no clock skew to allow for. From is recorded after
// HolderContext returned (never before the session held the grant), and To
// is the earlier of the noticed end and the deadline that bounds Valid
// exactly, so the span is never shorter than what the process could act on
// at its checks. Between one holder's To and the next one's From there is
// always at least an API round trip (a release written, then the operator's
// grant, then the new holder's first renewal) or the margin of the Session
// plus the operator's observation delay (expiry), so a correct product leaves
// a gap of milliseconds at the very least, and any overlap is a real one.
func checkBeliefs(h *History, r *Result) {
	byLease := map[string][]Belief{}
	for _, b := range h.Beliefs {
		if b.To < b.From {
			r.violate("belief of %s in fence %d of %s ends (%s) before it begins (%s)", b.Pod, b.Fence, b.Lease, b.To, b.From)
		}
		byLease[b.Lease] = append(byLease[b.Lease], b)
	}
	leases := make([]string, 0, len(byLease))
	for l := range byLease {
		leases = append(leases, l)
	}
	sort.Strings(leases)
	for _, l := range leases {
		bs := byLease[l]
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].From < bs[j].From })
		for i, a := range bs {
			for _, b := range bs[i+1:] {
				if b.From >= a.To {
					break // sorted by From: no later one starts before a ends
				}
				if a.PodUID == b.PodUID && a.Fence == b.Fence {
					continue
				}
				r.violate("%s and %s both believed they held %s: %s fence %d during [%s, %s] (ended: %s), %s fence %d during [%s, %s] (ended: %s), overlapping by %s",
					a.Pod, b.Pod, l, a.Pod, a.Fence, a.From, a.To, a.Why, b.Pod, b.Fence, b.From, b.To, b.Why, min(a.To, b.To)-b.From)
			}
		}
		// The fences believed go up with time.
		for i := 1; i < len(bs); i++ {
			if gap := bs[i].From - bs[i-1].To; gap >= 0 && (r.MinBeliefGap < 0 || gap < r.MinBeliefGap) {
				r.MinBeliefGap = gap
			}
			if bs[i].Fence < bs[i-1].Fence {
				r.violate("%s believed fence %d of %s from %s, after %s believed the newer fence %d from %s",
					bs[i].Pod, bs[i].Fence, l, bs[i].From, bs[i-1].Pod, bs[i-1].Fence, bs[i-1].From)
			}
		}
	}
}

// checkReleases: a late release (of an older fence, once a newer grant of
// the lease exists) changes nothing.
func checkReleases(h *History, r *Result) {
	for _, rel := range h.Releases {
		if rel.Outcome == ReleaseChanged {
			r.violate("release #%d by %s of its old fence %d of %s during [%s, %s] ended the newer grant with fence %d%s",
				rel.ID, rel.Pod, rel.Fence, rel.Lease, rel.Call, rel.Return, rel.Newer, errSuffix(rel.Err))
		}
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// holdersNear describes who held the lease around an attempt, for a
// violation message.
func holdersNear(h *History, a Attempt) string {
	var out string
	for _, hd := range h.Holdings {
		if hd.Lease != a.Lease || hd.From > a.Return+time.Second || (hd.To != Open && hd.To < a.Call-5*time.Second) {
			continue
		}
		to := "open"
		if hd.To != Open {
			to = hd.To.String()
		}
		out += fmt.Sprintf("; %s %s (%s) held fence %d during [%s, %s]", hd.Via, hd.Pod, hd.PodUID, hd.Fence, hd.From, to)
	}
	return out
}

// checkStatusAttempts: no status write that tried to remove a protected
// object's label or move its stored fence was accepted, whoever sent it.
func checkStatusAttempts(h *History, r *Result) {
	for _, a := range h.StatusAttempts {
		if a.Outcome == Accepted {
			r.violate("a %s status write (%s) of lease %s by %s with fence %d was accepted", a.Change, a.Source, a.Lease, a.Process, a.Fence)
		}
	}
}
