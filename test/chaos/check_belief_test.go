//go:build chaos

package chaos

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// belief is pod's belief in fence of l0 during [from, to], ended by why.
func belief(pod string, fence int64, from, to time.Duration, why string) Belief {
	return Belief{Lease: "l0", Pod: pod, PodUID: types.UID("uid-" + pod), Fence: fence, From: from, To: to, Why: why}
}

// withBeliefs is cleanHistory with the beliefs of renewal Holder processes
// that match its holdings: a believes fence 10 until it released it, b
// believes fence 20 from a moment after.
func withBeliefs() *History {
	h := cleanHistory()
	h.Beliefs = []Belief{belief("a", 10, 60*ms, 380*ms, "release"), belief("b", 20, 560*ms, 5000*ms, "stop")}
	h.Releases = []Release{
		{ID: 0, Pod: "a", PodUID: "uid-a", Lease: "l0", Kind: ReleaseHeld, Fence: 10, Outcome: ReleaseReleased, Call: 380 * ms, Return: 390 * ms},
		{ID: 1, Pod: "a", PodUID: "uid-a", Lease: "l0", Kind: ReleaseLate, Fence: 10, Newer: 20, Outcome: ReleaseNoop, Call: 900 * ms, Return: 901 * ms},
	}
	return h
}

func TestCheckBeliefsClean(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	r := check(t, h)
	g.Expect(r.Violations).To(BeEmpty())
	s := Summarize(1, 0, h, r)
	g.Expect(s.BeliefHandoffs).To(Equal(1))
	g.Expect(s.Released).To(Equal(1))
	g.Expect(s.LateNoop).To(Equal(1))
}

// TestCheckBeliefOverlap: b believes fence 20 while a still believes fence
// 10 (a noticed the loss late, and its deadline was later still): two pods
// believed they held l0 at once.
func TestCheckBeliefOverlap(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Beliefs[0].To, h.Beliefs[0].Why = 600*ms, "lost"
	r := check(t, h)
	g.Expect(r.Violations).To(ConsistOf(ContainSubstring("a and b both believed they held l0")))
	g.Expect(r.Violations[0]).To(ContainSubstring("overlapping by 40ms"))
}

// TestCheckBeliefOverlapOneMillisecond: there is no tolerance, an overlap of
// a millisecond is one.
func TestCheckBeliefOverlapOneMillisecond(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Beliefs[0].To = h.Beliefs[1].From + ms
	g.Expect(check(t, h).Violations).To(ConsistOf(ContainSubstring("both believed")))
	h.Beliefs[0].To = h.Beliefs[1].From
	g.Expect(check(t, h).Violations).To(BeEmpty(), "touching beliefs do not overlap")
}

// TestCheckBeliefOverlapSamePod: the same pod believing two grants at once
// is a violation too; its two beliefs of one grant are not.
func TestCheckBeliefOverlapSamePod(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Beliefs[1].Pod, h.Beliefs[1].PodUID, h.Beliefs[1].From = "a", "uid-a", 300*ms
	g.Expect(check(t, h).Violations).To(ContainElement(ContainSubstring("a and a both believed")))
}

// TestCheckBeliefFenceGoesBack: a later belief with an older fence.
func TestCheckBeliefFenceGoesBack(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Beliefs = append(h.Beliefs, belief("c", 15, 5100*ms, 5200*ms, ""))
	g.Expect(check(t, h).Violations).To(ConsistOf(ContainSubstring("believed fence 15 of l0 from 5.1s, after b believed the newer fence 20")))
}

// TestCheckBeliefIsAuthority: an accepted write covered by the writer's
// belief only (no holding published yet in the watches) is no violation.
func TestCheckBeliefIsAuthority(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Holdings[3].From = 700 * ms // the pod watch saw b's grant after its write returned
	h.Holdings[2].From = 700 * ms // and so did the status watch
	g.Expect(check(t, h).Violations).To(BeEmpty())
	h.Beliefs[1].From = 650 * ms
	g.Expect(check(t, h).Violations).To(ContainElement(ContainSubstring("write #2 by b (pod b) with fence 20 to o accepted during [600ms, 610ms], but the pod did not hold fence 20")))
}

// TestCheckLateReleaseChanged: a late release that ended the newer grant.
func TestCheckLateReleaseChanged(t *testing.T) {
	g := NewWithT(t)
	h := withBeliefs()
	h.Releases[1].Outcome, h.Releases[1].Err = ReleaseChanged, "the Lease went from held to released"
	g.Expect(check(t, h).Violations).To(ConsistOf(ContainSubstring("release #1 by a of its old fence 10 of l0 during [900ms, 901ms] ended the newer grant with fence 20")))
}
