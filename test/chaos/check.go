//go:build chaos

package chaos

import (
	"fmt"
	"sort"
	"time"
)

// CheckOptions tune the checks of a history.
type CheckOptions struct {
	// Window is how long after a holding is seen to end (or a newer grant is
	// seen) a write of the old holder may still be admitted: admission is not
	// a transaction with the FencedLease (DESIGN §6, invariant 4), the
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
}

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Check runs every check of the history but the holder checker's, which
// watches the publications itself (testenv.WatchHolders).
func Check(h *History, o CheckOptions) (*Result, error) {
	r := &Result{}
	checkAuthority(h, o, r)
	checkNewerGrant(h, o, r)
	checkApplyOrder(h, r)
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
// accepted after the window.
func checkNewerGrant(h *History, o CheckOptions, r *Result) {
	type grant struct {
		fence int64
		at    time.Duration
	}
	grants := map[string][]grant{}
	for _, hd := range h.Holdings {
		if hd.Via != ViaRead {
			grants[hd.Lease] = append(grants[hd.Lease], grant{hd.Fence, hd.From})
		}
	}
	for _, a := range h.Attempts {
		if a.Outcome != Accepted {
			continue
		}
		for _, g := range grants[a.Lease] {
			if g.fence > a.Fence && g.at+o.Window < a.Call {
				r.violate("write #%d by %s with fence %d to %s accepted at [%s, %s], but fence %d of %s was granted at %s (%s before the call)",
					a.ID, a.Process, a.Fence, a.Object, a.Call, a.Return, g.fence, a.Lease, g.at, a.Call-g.at)
				break
			}
		}
	}
}

// checkApplyOrder checks the objects' versions as their watches delivered
// them, in the order the API server applied the writes: fences never go back;
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
	for _, object := range objects {
		var prev Version
		for i, v := range h.Versions[object] {
			if i > 0 && v.Fence < prev.Fence {
				r.violate("%s went from fence %d (%q, resourceVersion %s) to fence %d (%q, resourceVersion %s)",
					object, prev.Fence, prev.Value, prev.ResourceVersion, v.Fence, v.Value, v.ResourceVersion)
			}
			prev = v
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
