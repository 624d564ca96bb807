//go:build chaos

package chaos

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The checker's tests feed hand-made histories: a clean one passes, and each
// kind of violation is found. They need no control plane:
// go test -tags chaos -run 'TestCheck|TestClassify' ./test/chaos

const ms = time.Millisecond

// attempt is write #id of pod's process to object o, with the fence of l0
// and the value.
func attempt(id int, pod string, fence int64, value string, call, ret time.Duration, outcome Outcome, source Source) Attempt {
	return Attempt{ID: id, Process: pod, Pod: pod, PodUID: types.UID("uid-" + pod), Lease: "l0", Object: "o", Fence: fence, Value: value,
		Call: call, Return: ret, Outcome: outcome, Source: source}
}

// holding is pod holding fence of l0 during [from, to], seen via.
func holding(pod string, fence int64, from, to time.Duration, via Via) Holding {
	return Holding{Lease: "l0", Pod: pod, PodUID: types.UID("uid-" + pod), Fence: fence, From: from, To: to, Via: via}
}

// finalRead is the read of o at the end that finds version v.
func finalRead(v Version) Read {
	return Read{Object: "o", Fence: v.Fence, Value: v.Value, ResourceVersion: v.ResourceVersion, Call: 5000 * ms, Return: 5010 * ms}
}

// endsWith makes v the last version of o, the one the final read finds.
func endsWith(h *History, v Version) {
	h.Versions["o"] = append(h.Versions["o"], v)
	h.Final[0] = finalRead(v)
}

// cleanHistory: pod a holds fence 10 of l0, then pod b fence 20; each writes
// o while it holds; a stale write of a with fence 10 after the handoff is
// rejected; the final read shows b's last write.
func cleanHistory() *History {
	h := &History{
		Attempts: []Attempt{
			attempt(0, "a", 10, "a/1", 100*ms, 110*ms, Accepted, SourceFresh),
			attempt(1, "a", 10, "a/2", 200*ms, 210*ms, Accepted, SourceFresh),
			attempt(2, "b", 20, "b/1", 600*ms, 610*ms, Accepted, SourceFresh),
			attempt(3, "a", 10, "a/3", 3000*ms, 3010*ms, Rejected, SourceStale),
			// Unknown outcome, not applied: it can go after the final read.
			attempt(4, "b", 20, "b/2", 3100*ms, 3200*ms, Unknown, SourceFresh),
		},
		Holdings: []Holding{
			holding("a", 10, 50*ms, 400*ms, ViaPod),
			holding("a", 10, 40*ms, 420*ms, ViaStatus),
			holding("b", 20, 510*ms, Open, ViaStatus),
			holding("b", 20, 550*ms, Open, ViaPod),
		},
		Versions: map[string][]Version{"o": {
			{Fence: 0, Value: "", ResourceVersion: "1"},
			{Fence: 10, Value: "a/1", ResourceVersion: "2"},
			{Fence: 10, Value: "a/2", ResourceVersion: "3"},
		}},
		Gaps:  map[string]bool{},
		Final: make([]Read, 1),
		End:   6000 * ms,
	}
	h.Attempts[3].Reason = "stale_fence"
	h.Attempts[4].Reason = "client_timeout"
	endsWith(h, Version{Fence: 20, Value: "b/1", ResourceVersion: "4"})
	return h
}

func check(t *testing.T, h *History) *Result {
	t.Helper()
	r, err := Check(h, CheckOptions{Window: 100 * ms, LinearizabilityTimeout: 10 * time.Second,
		Visualization: filepath.Join(t.TempDir(), "porcupine.html")})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return r
}

func TestCheckCleanHistory(t *testing.T) {
	g := NewWithT(t)
	r := check(t, cleanHistory())
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.UnknownLost).To(Equal(1))
}

// TestCheckFenceGoesBack: the object takes fence 10 after fence 20 was
// accepted, the porcupine model and the apply order both say so, and the
// visualisation is written.
func TestCheckFenceGoesBack(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Attempts[3].Outcome, h.Attempts[3].Reason = Accepted, ""
	// Pretend a still held fence 10 (so that only the order is wrong).
	h.Holdings[0].To = Open
	endsWith(h, Version{Fence: 10, Value: "a/3", ResourceVersion: "5"})
	vis := filepath.Join(t.TempDir(), "porcupine.html")
	r, err := Check(h, CheckOptions{Window: 100 * ms, LinearizabilityTimeout: 10 * time.Second, Visualization: vis})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Violations).To(ContainElement(ContainSubstring("not linearizable")))
	g.Expect(r.Violations).To(ContainElement(`o went from fence 20 ("b/1", resourceVersion 4) to fence 10 ("a/3", resourceVersion 5)`))
	g.Expect(r.Violations).To(ContainElement(ContainSubstring("write #3 by a with fence 10 to o accepted at [3s, 3.01s], but fence 20 of l0 was granted at 510ms (2.49s before the call)")))
	data, err := os.ReadFile(vis)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("<html"))
}

// TestCheckFenceStaysBelowTheHighest: after going back, the object takes a
// fence between the two; it is still below the highest one it had.
func TestCheckFenceStaysBelowTheHighest(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Holdings[0].To = Open
	h.Attempts[3].Outcome, h.Attempts[3].Reason = Accepted, ""
	h.Attempts = append(h.Attempts, attempt(5, "a", 15, "a/4", 3050*ms, 3060*ms, Accepted, SourceStale))
	h.Versions["o"] = append(h.Versions["o"], Version{Fence: 10, Value: "a/3", ResourceVersion: "5"})
	endsWith(h, Version{Fence: 15, Value: "a/4", ResourceVersion: "6"})
	g.Expect(check(t, h).Violations).To(ContainElements(
		`o went from fence 20 ("b/1", resourceVersion 4) to fence 10 ("a/3", resourceVersion 5)`,
		`o went from fence 20 ("b/1", resourceVersion 4) to fence 15 ("a/4", resourceVersion 6)`,
	))
}

// TestCheckConcurrentWritesMayInterleave: two accepted writes whose calls
// overlap may be applied in either order; porcupine must find the order
// that the final read shows, not the order of their calls.
func TestCheckConcurrentWritesMayInterleave(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Attempts = h.Attempts[:2]
	h.Attempts[1].Call, h.Attempts[1].Return = 100*ms, 110*ms
	h.Versions["o"] = []Version{{Value: ""}, {Fence: 10, Value: "a/2", ResourceVersion: "2"}, {Fence: 10, Value: "a/1", ResourceVersion: "3"}}
	h.Final[0] = finalRead(h.Versions["o"][2])
	g.Expect(check(t, h).Violations).To(BeEmpty())
	// Had a/2 returned before a/1 was called, a/1 could not be last... and
	// it is: the reverse is the violation.
	h.Attempts[1].Call, h.Attempts[1].Return = 200*ms, 210*ms
	g.Expect(check(t, h).Violations).To(ContainElement(ContainSubstring("not linearizable")))
}

// TestCheckLostAcknowledgedWrite: an accepted write that the final read
// does not show, though nothing overwrote it.
func TestCheckLostAcknowledgedWrite(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Versions["o"] = h.Versions["o"][:3]
	h.Final[0] = finalRead(h.Versions["o"][2])
	r := check(t, h)
	g.Expect(r.Violations).To(ContainElement(ContainSubstring("not linearizable")))
	g.Expect(r.Violations).To(ContainElement(`write #2 by b to o was accepted ("b/1", fence 20) but no watch event shows it applied`))
}

// TestCheckUnknownOutcomeApplied: a write of unknown outcome that was
// applied is no violation, wherever the final read finds it.
func TestCheckUnknownOutcomeApplied(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	endsWith(h, Version{Fence: 20, Value: "b/2", ResourceVersion: "5"})
	r := check(t, h)
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.UnknownApplied).To(Equal(1))
}

// TestCheckWriteFromNonHolder: a standby's write with the holder's fence
// (an impostor) is accepted.
func TestCheckWriteFromNonHolder(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Attempts = append(h.Attempts, attempt(5, "c", 20, "c/1", 700*ms, 710*ms, Accepted, SourceImpostor))
	endsWith(h, Version{Fence: 20, Value: "c/1", ResourceVersion: "5"})
	r := check(t, h)
	g.Expect(r.Violations).To(HaveLen(1))
	g.Expect(r.Violations[0]).To(HavePrefix("write #5 by c (pod c) with fence 20 to o accepted during [700ms, 710ms], but the pod did not hold fence 20 of l0 then"))
}

// TestCheckStaleHolderAfterWindow: the old holder's write with its own
// fence, accepted after its holding ended and after the newer grant: within
// the window it is allowed and counted, after it a violation.
func TestCheckStaleHolderAfterWindow(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Attempts = h.Attempts[:3]
	h.Attempts[1].Call, h.Attempts[1].Return = 450*ms, 600*ms // 50ms after a's publication ended, before b's grant
	h.Holdings[1].To = 400 * ms
	r := check(t, h)
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.InWindow).To(Equal(1))
	g.Expect(r.MaxLateness).To(Equal(50 * ms))

	h.Attempts[1].Call, h.Attempts[1].Return = 650*ms, 660*ms
	h.Attempts[2].Call, h.Attempts[2].Return = 670*ms, 680*ms
	h.Versions["o"] = []Version{{Value: ""}, {Fence: 10, Value: "a/1", ResourceVersion: "2"}, {Fence: 10, Value: "a/2", ResourceVersion: "3"}, {Fence: 20, Value: "b/1", ResourceVersion: "4"}}
	r = check(t, h)
	g.Expect(r.Violations).To(ConsistOf(
		HavePrefix("write #1 by a (pod a) with fence 10 to o accepted during [650ms, 660ms], but the pod did not hold fence 10 of l0 then"),
		"write #1 by a with fence 10 to o accepted at [650ms, 660ms], but fence 20 of l0 was granted at 510ms (140ms before the call)",
	))
}

// TestCheckStatusOnly: a write by a pod already demoted, which the status
// still names, is legal for the webhook; it is noted, not a violation.
func TestCheckStatusOnly(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Attempts = h.Attempts[:3]
	h.Holdings[1].To = 2000 * ms
	h.Holdings[2].From, h.Holdings[3].From = 2100*ms, 2150*ms
	h.Attempts[1].Call, h.Attempts[1].Return = 1000*ms, 1010*ms
	h.Attempts[2].Call, h.Attempts[2].Return = 2200*ms, 2210*ms
	r := check(t, h)
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.StatusOnly).To(Equal(1))
	g.Expect(r.Notes).To(ConsistOf(HavePrefix("write #1 by a with fence 10 to o accepted during [1s, 1.01s] after the pod was demoted; the status still named it")))
}

// TestCheckRejectedButApplied: a write that its caller saw rejected shows up
// in the object.
func TestCheckRejectedButApplied(t *testing.T) {
	g := NewWithT(t)
	h := cleanHistory()
	h.Versions["o"] = append(h.Versions["o"], Version{Fence: 10, Value: "a/3", ResourceVersion: "5"})
	g.Expect(check(t, h).Violations).To(ContainElement(`write #3 by a to o was rejected (stale_fence) and yet applied: "a/3" with fence 10`))
}

func TestClassify(t *testing.T) {
	g := NewWithT(t)
	gr := schema.GroupResource{Resource: "configmaps"}
	denied := func(msg string) error {
		return apierrors.NewForbidden(gr, "o", errors.New(`admission webhook "protected.fencedlease.io" denied the request: ConfigMap ns/o: `+msg))
	}
	for msg, reason := range map[string]string{
		`write with fence 41 rejected: stale holder: FencedLease "db" is at fence 42`:                                                   "stale_fence",
		`write with fence 41 rejected: the object was last written with fence 42`:                                                       "object_fence_regression",
		`write with fence 99 rejected: unknown fence: FencedLease "db" is at fence 42`:                                                  "unknown_fence",
		`write with fence 42 rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence 42)`:                           "not_holder",
		`write with fence 42 rejected: FencedLease "db" has no holder (fence 42)`:                                                       "no_holder",
		`write with fence 42 rejected: FencedLease "db" not found in namespace team-a`:                                                  "lease_not_found",
		`write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`: "missing_fence",
		`write rejected: annotation fencedlease.io/fence: invalid fence "007": leading zero`:                                            "malformed_fence",
		`write with fence 42 rejected: something new`:                                                                                   "denied_other",
	} {
		outcome, got := Classify(denied(msg))
		g.Expect(outcome).To(Equal(Rejected), msg)
		g.Expect(got).To(Equal(reason), msg)
	}
	webhookDown := apierrors.NewInternalError(errors.New(`failed calling webhook "protected.fencedlease.io": failed to call webhook: Post "https://127.0.0.1:1/x": dial tcp 127.0.0.1:1: connect: connection refused`))
	for _, c := range []struct {
		err     error
		outcome Outcome
		reason  string
	}{
		{nil, Accepted, ""},
		{webhookDown, Rejected, "webhook_unavailable"},
		{apierrors.NewUnauthorized("token"), Rejected, "unauthorized"},
		{apierrors.NewTimeoutError("lost", 1), Unknown, "server_timeout"},
		{errors.New("http2: client connection lost"), Unknown, "error"},
	} {
		outcome, reason := Classify(c.err)
		g.Expect(outcome).To(Equal(c.outcome), "%v", c.err)
		g.Expect(reason).To(Equal(c.reason), "%v", c.err)
	}
	g.Expect(strings.Contains(webhookDown.Error(), "failed calling webhook")).To(BeTrue())
}
