package invariant

import (
	"fmt"
	"slices"
)

// Publication is what one pod is published as: the holder of Lease (a
// FencedLease's name) with Fence, or nothing when Fence is 0. A fence that
// does not parse is -1; Raw is the fence as the pod carries it, named in
// the message of a malformed one.
type Publication struct {
	Pod   string
	UID   string
	Lease string
	Fence int64
	Raw   string
}

// Holds says whether the pod is published as a holder.
func (p Publication) Holds() bool { return p.Fence != 0 }

func (p Publication) same(q Publication) bool {
	return p.Holds() == q.Holds() && p.Lease == q.Lease && p.Fence == q.Fence
}

// Publications tracks the publications of pods, in the order they were
// made, and checks them: at most one pod of a FencedLease holds at once
// (TwoHolders); a fence published is never below one published before
// (FenceWentDown), never the fence of another pod (FenceToTwoPods), and
// never one the pod lost (FenceRegained); and it parses (MalformedFence).
// Pods are told apart by UID, FencedLeases by name: a FencedLease created
// again under the same name goes on from the fences of the old one.
type Publications struct {
	pods map[string]Publication
	// highest is the highest fence published, per FencedLease, and to is
	// the pod it went to.
	highest map[string]Publication
	lost    map[string]map[int64]bool
	// noun names what is held in messages: "FencedLease", or "shard".
	noun string
}

// NewPublications returns a tracker that has seen no pod.
func NewPublications() *Publications {
	return &Publications{pods: map[string]Publication{}, highest: map[string]Publication{}, lost: map[string]map[int64]bool{}, noun: "FencedLease"}
}

// NewShardPublications returns a tracker of the shards of FencedShardSets:
// the same rules per shard, whose Lease field is "<set>/<key>".
func NewShardPublications() *Publications {
	t := NewPublications()
	t.noun = "shard"
	return t
}

// Highest is the highest fence published for the FencedLease, 0 for none.
func (t *Publications) Highest(lease string) int64 { return t.highest[lease].Fence }

// Observe records what the pod p.UID is published as now and returns the
// rules the change breaks. A publication seen again unchanged is no change.
func (t *Publications) Observe(p Publication) []Violation {
	prev, known := t.pods[p.UID]
	if known && prev.same(p) {
		t.pods[p.UID] = p
		return nil
	}
	t.end(prev)
	if !p.Holds() {
		delete(t.pods, p.UID)
		return nil
	}
	t.pods[p.UID] = p
	var out []Violation
	if v, ok := t.checkFence(p); ok {
		out = append(out, v)
	} else {
		t.highest[p.Lease] = p
	}
	if v, ok := t.checkHolders(p.Lease); ok {
		out = append(out, v)
	}
	return out
}

// Gone records that the pod uid is gone: the fence it held is lost.
func (t *Publications) Gone(uid string) {
	t.end(t.pods[uid])
	delete(t.pods, uid)
}

// end records that the publication p ended: its pod lost its fence.
func (t *Publications) end(p Publication) {
	if !p.Holds() {
		return
	}
	if t.lost[p.Lease] == nil {
		t.lost[p.Lease] = map[int64]bool{}
	}
	t.lost[p.Lease][p.Fence] = true
}

// checkFence checks the fence of a new publication against those before.
func (t *Publications) checkFence(p Publication) (Violation, bool) {
	h := t.highest[p.Lease]
	switch {
	case p.Fence < 0:
		return violation(MalformedFence, "pod %s got malformed fence %q of %s %s", p.Pod, p.Raw, t.noun, p.Lease), true
	case p.Fence < h.Fence:
		return violation(FenceWentDown, "pod %s got fence %d of %s %s after fence %d was published", p.Pod, p.Fence, t.noun, p.Lease, h.Fence), true
	case p.Fence == h.Fence && p.UID != h.UID:
		return violation(FenceToTwoPods, "pod %s got fence %d of %s %s, which was published to pod %s (UID %s) before",
			p.Pod, p.Fence, t.noun, p.Lease, h.Pod, h.UID), true
	case t.lost[p.Lease][p.Fence]:
		return violation(FenceRegained, "pod %s got fence %d of %s %s again after losing it", p.Pod, p.Fence, t.noun, p.Lease), true
	}
	return Violation{}, false
}

// checkHolders checks that one pod at most holds the FencedLease.
func (t *Publications) checkHolders(lease string) (Violation, bool) {
	var holders []string
	for _, p := range t.pods {
		if p.Holds() && p.Lease == lease {
			holders = append(holders, fmt.Sprintf("%s(fence %d)", p.Pod, p.Fence))
		}
	}
	if len(holders) < 2 {
		return Violation{}, false
	}
	slices.Sort(holders)
	return violation(TwoHolders, "%d pods published as holder of %s %s at once: %v", len(holders), t.noun, lease, holders), true
}
