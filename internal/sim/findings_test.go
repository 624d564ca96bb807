package sim_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/sim"
)

// These scenarios replay, step by step, the interleavings that once broke the
// lock. Each must leave every invariant intact; the checker fails them at the
// first write that breaks one.

var app = map[string]string{"app": "db"}

func script(t *testing.T, replicas int) (*sim.Script, Gomega) {
	t.Helper()
	g := NewWithT(t)
	sc, err := sim.NewScript(replicas, indexes(), reconciler)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if t.Failed() || len(sc.Violations()) > 0 {
			t.Logf("trace:\n%s", sc.Trace())
		}
		g.Expect(sc.Violations()).To(BeEmpty())
	})
	return sc, g
}

func immediate(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate }

func status(g Gomega, sc *sim.Script, name string) fencingv1alpha1.FencedLeaseStatus {
	fl := &fencingv1alpha1.FencedLease{}
	g.Expect(sc.Get(name, fl)).To(Succeed())
	return fl.Status
}

func lease(g Gomega, sc *sim.Script, name string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	g.Expect(sc.Get(name, l)).To(Succeed())
	return l
}

// holds settles replica 0 until pod holds FencedLease db, published, and
// returns its fence.
func holds(g Gomega, sc *sim.Script, pod string) int64 {
	sc.Settle(0, "db", 10)
	st := status(g, sc, "db")
	g.Expect(st.Holder).NotTo(BeNil())
	g.Expect(st.Holder.PodName).To(Equal(pod))
	g.Expect(sc.Holders("db")).To(Equal([]string{pod}))
	return st.Fence
}

// recordsHolder reconciles on a replica until the status names pod as
// holder, and fails the publication's first request (the list of the
// labelled pods), so that the grant is recorded and not published yet.
func recordsHolder(g Gomega, sc *sim.Script, replica int, pod string) {
	for i := 0; i < 5; i++ {
		if h := status(g, sc, "db").Holder; h != nil && h.PodName == pod {
			return
		}
		sc.Start(replica, "db")
		if sc.RunUntil(replica, "db", fmt.Sprintf("r%d live list Pod", replica)) {
			sc.Fail(replica, "db")
		}
		sc.Finish(replica, "db")
	}
	g.Expect(status(g, sc, "db").Holder).NotTo(BeNil())
	g.Expect(status(g, sc, "db").Holder.PodName).To(Equal(pod))
}

// Finding 1: the status went back to an old grant. The FencedLease cache of
// replica 1 shows holder b, its Lease cache still holder a; it plans on the
// stale Lease, its write conflicts, and its status patch must not record a.
func TestStatusNeverRecordsAnOlderLease(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")
	sc.Settle(1, "db", 3) // replica 1 has seen a hold the lease
	sc.Freeze(1, "Lease")

	g.Expect(sc.SetReady("a", false)).To(Succeed())
	second := holds(g, sc, "b")
	g.Expect(second).To(BeNumerically(">", first))

	// Replica 1: FencedLease and pods fresh, Lease cache stale.
	sc.Reconcile(1, "db")
	st := status(g, sc, "db")
	g.Expect(st.Holder.PodName).To(Equal("b"))
	g.Expect(st.Fence).To(Equal(second))
}

// Finding 1, without any lag: a status patch from an earlier reconcile,
// which recorded a grant, arrives after a later reconcile recorded a newer
// one.
func TestLateStatusPatchDoesNotWin(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, 30*time.Minute)).To(Succeed())
	g.Expect(sc.Pod("c", "n2", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")

	// Replica 1 grants b and stops just before it records that in the status.
	g.Expect(sc.SetReady("a", false)).To(Succeed())
	sc.Start(1, "db")
	g.Expect(sc.RunUntil(1, "db", "status patch")).To(BeTrue())
	g.Expect(ptr.Deref(lease(g, sc, "db").Spec.HolderIdentity, "")).To(Equal("b"))

	// Meanwhile b fails too, and replica 0 grants c and records it.
	g.Expect(sc.SetReady("b", false)).To(Succeed())
	third := holds(g, sc, "c")
	sc.Finish(1, "db") // the late patch
	st := status(g, sc, "db")
	g.Expect(st.Holder.PodName).To(Equal("c"))
	g.Expect(st.Fence).To(Equal(third))
	g.Expect(third).To(BeNumerically(">", first))
}

// Finding 2a: replica 1 has confirmed b's grant live and pauses before it
// publishes b; b stops being eligible without its pod changing (another
// FencedLease starts selecting it); replica 0 grants and publishes c; then
// replica 1 resumes. Its publication must fail.
func TestPausedPublisherCannotPublishAnEndedGrant(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", map[string]string{"app": "db", "team": "x"}, 30*time.Minute)).To(Succeed())
	g.Expect(sc.Pod("c", "n2", app, time.Minute)).To(Succeed())
	holds(g, sc, "a")

	// a fails; replica 0 grants b and records it, but does not publish it.
	g.Expect(sc.SetReady("a", false)).To(Succeed())
	recordsHolder(g, sc, 0, "b")
	g.Expect(status(g, sc, "db").Holder.PodName).To(Equal("b"))
	g.Expect(sc.Holders("db")).To(BeEmpty())

	// Replica 1 goes through the publication of b up to its last write.
	sc.Start(1, "db")
	g.Expect(sc.RunUntil(1, "db", "r1 patch Pod ns/b")).To(BeTrue(), "b's grant is confirmed current; its publication waits")

	// Another FencedLease selects b: it is no longer eligible for db.
	g.Expect(sc.FencedLease("other", map[string]string{"team": "x"}, immediate)).To(Succeed())
	holds(g, sc, "c")

	sc.Finish(1, "db")
	g.Expect(sc.Holders("db")).To(Equal([]string{"c"}))
}

// Finding 2b: replica 1's pod cache has not seen replica 0 publish a (it
// still reads a as a standby); a's grant is rotated away (maxHoldSeconds,
// takeover Immediate: nothing changes on the pod); replica 1 grants b, skips
// demoting a because its cache reads a as a standby, and publishes b. a must
// have been demoted before b is published.
func TestPublisherWithStalePodCacheDemotesThePreviousHolder(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, func(fl *fencingv1alpha1.FencedLease) {
		immediate(fl)
		fl.Spec.MaxHoldSeconds = 10
	})).To(Succeed())
	g.Expect(sc.Pod("c", "n2", app, 2*time.Hour)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "c")

	// c fails; replica 0 grants a and records it, not yet published: a
	// still reads as a standby, and so it stays in replica 1's pod cache.
	g.Expect(sc.SetReady("c", false)).To(Succeed())
	recordsHolder(g, sc, 0, "a")
	g.Expect(sc.Holders("db")).To(BeEmpty())
	sc.Reconcile(1, "db") // replica 1 publishes a...
	sc.Freeze(1, "Pod")   // ...but its pod cache never sees it
	second := holds(g, sc, "a")
	g.Expect(second).To(BeNumerically(">", first))

	sc.Advance(4 * time.Second)
	sc.Reconcile(0, "db") // renewal
	sc.Advance(4 * time.Second)
	sc.Reconcile(0, "db")
	sc.Advance(4 * time.Second) // maxHold reached
	sc.Reconcile(1, "db")       // grants b on its stale view of the pods
	g.Expect(ptr.Deref(lease(g, sc, "db").Spec.HolderIdentity, "")).To(Equal("b"))
	sc.Reconcile(1, "db")
	sc.Reconcile(1, "db")
	sc.Thaw(1)
	sc.Settle(1, "db", 10)
	st := status(g, sc, "db")
	g.Expect(st.Fence).To(BeNumerically(">", second))
	g.Expect(st.Holder.PodName).To(Equal("b"))
	g.Expect(sc.Holders("db")).To(Equal([]string{"b"}))
}

// Finding 3: the Lease is deleted while takeover Safe waits for a revoked
// grant to expire. The wait must go on, and the transition count must not
// go back.
func TestSafeWaitSurvivesLeaseDeletion(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, nil)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")
	transitions := status(g, sc, "db").Transitions

	g.Expect(sc.SetReady("a", false)).To(Succeed())
	sc.Settle(0, "db", 5)
	g.Expect(status(g, sc, "db").Holder).To(BeNil(), "revoked")
	g.Expect(sc.DeleteLease("db")).To(Succeed())
	sc.Advance(time.Second)
	sc.Settle(0, "db", 5)
	l := lease(g, sc, "db")
	g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("revoked"))
	g.Expect(l.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(first, 10)))
	g.Expect(ptr.Deref(l.Spec.LeaseTransitions, 0)).To(Equal(transitions))
	g.Expect(sc.Holders("db")).To(BeEmpty())

	sc.Advance(8 * time.Second) // 9s after the revocation, of a 10s lease
	sc.Settle(0, "db", 5)
	g.Expect(sc.Holders("db")).To(BeEmpty())
	sc.Advance(2 * time.Second)
	second := holds(g, sc, "b")
	g.Expect(second).To(BeNumerically(">", first))
	g.Expect(status(g, sc, "db").Transitions).To(Equal(transitions + 1))
}

// Finding 4: the holder's node is lost. The node lifecycle controller sets
// Ready=Unknown and the unreachable taint but leaves the pod's
// ContainersReady True; the holder must lose its grant at once.
func TestLostNodeEndsTheGrant(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")

	g.Expect(sc.LoseNode("n0")).To(Succeed())
	second := holds(g, sc, "b")
	g.Expect(second).To(BeNumerically(">", first))
	g.Expect(status(g, sc, "db").Candidates).To(Equal(int32(1)))
}

// Finding 5: a user who may edit pods writes a huge fence on a pod. It must
// not block grants (it is no fence the operator published).
func TestForgedPodFenceDoesNotBlockGrants(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")

	g.Expect(sc.Annotate("b", fencingv1alpha1.AnnotationFence, "9223372036854775807")).To(Succeed())
	g.Expect(sc.SetReady("a", false)).To(Succeed())
	second := holds(g, sc, "b")
	g.Expect(second).To(BeNumerically(">", first))
	for _, c := range status(g, sc, "db").Conditions {
		if c.Type == fencingv1alpha1.ConditionDegraded {
			g.Expect(c.Status).To(BeEquivalentTo("False"), c.Message)
		}
	}
}

// Found by the simulation (seed 259): a renewal-mode change gives the holder
// a fresh grant, and the replica that wrote it (pending) crashes before it
// commits it. The holder's containers then stop being ready. Superseding the
// pending grant must not grant another pod at once under Safe takeover: the
// committed grant it replaced is still valid until a lease duration after its
// last renewal.
func TestPendingRegrantKeepsTheSafeWait(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, nil)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")

	g.Expect(sc.UpdateFencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
	})).To(Succeed())
	sc.Start(0, "db")
	g.Expect(sc.RunUntil(0, "db", "update Lease")).To(BeTrue())
	sc.Step(0, "db") // the fresh grant to a, pending
	g.Expect(lease(g, sc, "db").Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("pending"))
	sc.Crash(0)

	g.Expect(sc.SetReady("a", false)).To(Succeed())
	sc.Advance(3 * time.Second) // past the pending grace
	sc.Settle(0, "db", 5)
	g.Expect(sc.Holders("db")).To(BeEmpty())
	g.Expect(lease(g, sc, "db").Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).NotTo(BeEmpty())
	sc.Advance(5 * time.Second) // the grace is long past, 5s into the lease the restarted replica first saw
	sc.Settle(0, "db", 5)
	g.Expect(sc.Holders("db")).To(BeEmpty())
	g.Expect(lease(g, sc, "db").Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("pending"))

	sc.Advance(6 * time.Second)
	second := holds(g, sc, "b")
	g.Expect(second).To(BeNumerically(">", first))
}

// Step 3 of a publication must change every other labelled pod, even one
// its cache cannot demote. Replica 1 publishes b's grant and pauses before
// its last write, holding b's resourceVersion; replica 0, whose pod cache
// lags behind a change to b, hands the lease over to c: its demotion of b
// fails on the stale version, so only the marking of b in c's publication
// changes b, and makes replica 1's late write fail. (A publication that
// left a standby alone because it is a standby, whatever grant it is
// marked with, published b next to c here.)
func TestPublicationMarksAStandbyItsCacheCouldNotDemote(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, 3*time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, 2*time.Hour)).To(Succeed())
	g.Expect(sc.Pod("c", "n2", app, time.Hour)).To(Succeed())
	first := holds(g, sc, "a")

	// Replica 0's pod cache stops before someone else changes b.
	sc.Freeze(0, "Pod")
	g.Expect(sc.Annotate("b", "example.com/touched", "1")).To(Succeed())

	// a's node is lost; replica 1 grants b and records it.
	g.Expect(sc.LoseNode("n0")).To(Succeed())
	recordsHolder(g, sc, 1, "b")
	second := status(g, sc, "db").Fence
	g.Expect(second).To(BeNumerically(">", first))

	// Replica 1 goes through b's publication up to its last write.
	sc.Start(1, "db")
	g.Expect(sc.RunUntil(1, "db", "r1 patch Pod ns/b")).To(BeTrue(), "b's grant is confirmed current; its publication waits")

	// A handoff is requested; replica 0 grants c, and its demotion of b
	// fails on the stale version. Then its cache catches up and it
	// publishes c.
	g.Expect(sc.UpdateFencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		if fl.Annotations == nil {
			fl.Annotations = map[string]string{}
		}
		fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt] = "2026-12-01T10:00:00Z"
	})).To(Succeed())
	sc.Reconcile(0, "db")
	g.Expect(ptr.Deref(lease(g, sc, "db").Spec.HolderIdentity, "")).To(Equal("c"))
	g.Expect(sc.Trace()).To(ContainSubstring("r0 patch Pod ns/b\n  -> Operation cannot be fulfilled"), "the demotion of b failed")
	sc.Thaw(0)
	g.Expect(holds(g, sc, "c")).To(BeNumerically(">", second))

	sc.Finish(1, "db")
	g.Expect(sc.Holders("db")).To(Equal([]string{"c"}))
}

// Finding 6 (seed 4941): with holder renewal, a grant committed on the Lease
// whose status patch never lands is recorded on the Lease alone, and its
// holder, which learns of it from the Lease, renews it. The Lease is
// deleted, and the replica that reconciles next has never seen the grant.
// The finalizer keeps the Lease, the record, until the grant is over: the
// grant is revoked, and the Lease let go and re-created only once it
// expired. (Deleted at once, the Lease was re-created free and b granted
// while a's process still believed it held.)
func TestDeletedLeaseKeepsAnUnrecordedGrant(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
	})).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())

	// Replica 0 grants a and commits the grant; a renews it; the status
	// patch is lost with the replica.
	held := func() bool {
		l := &coordinationv1.Lease{}
		return sc.Get("db", l) == nil && l.Annotations[fencingv1alpha1.LeaseAnnotationState] == "held"
	}
	for i := 0; i < 5; i++ {
		sc.Start(0, "db")
		if sc.RunUntil(0, "db", "status patch") && held() {
			break
		}
		sc.Finish(0, "db")
	}
	l := lease(g, sc, "db")
	g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("held"))
	g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal("a"))
	first, err := record.ParseFence(l.Annotations[fencingv1alpha1.AnnotationFence])
	g.Expect(err).NotTo(HaveOccurred())
	sc.Advance(time.Second)
	g.Expect(sc.HolderRenews("a")).To(BeTrue(), "a's process believes it holds for 10s")
	sc.Crash(0)
	g.Expect(status(g, sc, "db").Fence).To(BeZero(), "the status never recorded the grant")

	g.Expect(sc.DeleteLease("db")).To(Succeed())
	g.Expect(sc.SetReady("a", false)).To(Succeed())
	sc.Settle(1, "db", 5)
	l = lease(g, sc, "db")
	g.Expect(l.DeletionTimestamp).NotTo(BeNil(), "the finalizer keeps the deleted Lease")
	g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("revoked"))
	g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal("a"))
	g.Expect(sc.HolderRenews("a")).To(BeFalse(), "a's process sees the revocation")

	sc.Advance(9 * time.Second) // of a 10s lease that replica 1 first saw at the deletion
	sc.Settle(1, "db", 5)
	g.Expect(sc.Holders("db")).To(BeEmpty())
	g.Expect(lease(g, sc, "db").DeletionTimestamp).NotTo(BeNil())

	sc.Advance(2 * time.Second)
	sc.Settle(1, "db", 10)
	l = lease(g, sc, "db")
	g.Expect(l.DeletionTimestamp).To(BeNil(), "re-created")
	g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	st := status(g, sc, "db")
	g.Expect(st.Holder).NotTo(BeNil())
	g.Expect(st.Holder.PodName).To(Equal("b"))
	g.Expect(st.Fence).To(BeNumerically(">", first))
	g.Expect(sc.Holders("db")).To(Equal([]string{"b"}))
}

// Finding 10: a FencedLease deleted and created again under the same name.
// Replica 1's FencedLease cache saw the deletion and not the new one; its
// pod cache is current. To replica 1 the FencedLease is gone, and it clears
// the pods that carry its label: those of the new FencedLease, whose holder
// then loses a fence it still holds, and is published it again. A replica
// must clear only the pods of a FencedLease that the API server confirms
// gone.
func TestStaleReplicaLeavesARecreatedFencedLeasesPodsAlone(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	first := holds(g, sc, "a")

	g.Expect(sc.DeleteFencedLease("db")).To(Succeed())
	sc.Settle(0, "db", 5)
	fl := &fencingv1alpha1.FencedLease{}
	g.Expect(sc.Get("db", fl)).NotTo(Succeed(), "the operator let the FencedLease go")
	sc.CatchUp(1)
	sc.Freeze(1, "FencedLease") // replica 1 never sees the new one

	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	second := holds(g, sc, "a")
	g.Expect(second).To(BeNumerically(">", first))

	sc.Reconcile(1, "db") // to replica 1, db is gone
	g.Expect(sc.Holders("db")).To(Equal([]string{"a"}), "replica 1 cleared the holder of the new FencedLease")
	sc.Settle(0, "db", 5)
	g.Expect(sc.Holders("db")).To(Equal([]string{"a"}))
}

// Finding 11: the same re-creation, seen by a replica whose caches still
// show the old FencedLease being deleted. It finishes that deletion: it
// lets go of the Lease and of the FencedLease by removing the operator's
// finalizers, and both patches name only a name, so they landed on the new
// Lease and the new FencedLease. Each must apply to the UID it was decided
// on, and change nothing of the new ones.
func TestStaleDeletionLeavesTheNewFinalizersAlone(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	holds(g, sc, "a")

	g.Expect(sc.DeleteFencedLease("db")).To(Succeed())
	sc.CatchUp(1)
	sc.Freeze(1, "FencedLease", "Lease") // replica 1 sees db being deleted, with its Lease
	sc.Settle(0, "db", 5)
	g.Expect(sc.Get("db", &fencingv1alpha1.FencedLease{})).NotTo(Succeed(), "replica 0 let the FencedLease go")
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	fence := holds(g, sc, "a")

	finalizers := func() ([]string, []string) {
		fl, l := &fencingv1alpha1.FencedLease{}, &coordinationv1.Lease{}
		g.Expect(sc.Get("db", fl)).To(Succeed())
		g.Expect(sc.Get("db", l)).To(Succeed())
		return fl.Finalizers, l.Finalizers
	}
	sc.Reconcile(1, "db") // finishes the old deletion, on its Lease as cached
	fl, l := finalizers()
	g.Expect(l).To(ContainElement(fencingv1alpha1.LeaseFinalizer), "replica 1 took the new Lease's finalizer")
	current := lease(g, sc, "db")
	g.Expect(current.DeletionTimestamp).To(BeNil(), "replica 1 deleted the new Lease")
	g.Expect(fl).To(ContainElement(fencingv1alpha1.Finalizer))

	sc.Thaw(1)
	sc.Freeze(1, "FencedLease") // now the new Lease, but still the old FencedLease
	sc.Reconcile(1, "db")
	fl, l = finalizers()
	g.Expect(fl).To(ContainElement(fencingv1alpha1.Finalizer), "replica 1 took the new FencedLease's finalizer")
	g.Expect(l).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	g.Expect(sc.Holders("db")).To(Equal([]string{"a"}))
	g.Expect(status(g, sc, "db").Fence).To(Equal(fence))
}

// TestRestartedOperatorGrantsWhatAPreviousProcessLeftWaiting: a previous
// operator process left db waiting for capacity, and db is all a restarted
// operator has to reconcile. Its looks at db must count as the time its
// pace measures the load in: once measured, db is granted.
func TestRestartedOperatorGrantsWhatAPreviousProcessLeftWaiting(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, nil)).To(Succeed())
	g.Expect(sc.LeftWaiting("db")).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	for i := 0; i < 40 && len(sc.Holders("db")) == 0; i++ {
		sc.Settle(0, "db", 5)
		sc.Advance(time.Second)
	}
	g.Expect(sc.Holders("db")).To(Equal([]string{"a"}), "db is granted once the restarted operator measured its load")
}

// A first grant's holder is labelled before its publication: replica 1
// creates db's Lease with a's first grant, records it, confirms it current,
// and pauses before it publishes a. Replica 0's pod cache has not seen a
// yet: to it the holder is gone, and it grants b and publishes it. Had a
// been left bare until its publication wrote the label with the fence,
// nothing replica 0 wrote would have touched a (its cache does not show a,
// and step 3 of b's publication marks the pods the API server lists with
// the label), and replica 1's publication would land on the version of a
// it read: two pods published as holder (docs/design.md, "Why a first
// grant's holder is labelled before its publication").
func TestAPausedFirstPublicationFailsOnceAnotherIsGranted(t *testing.T) {
	sc, g := script(t, 2)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Minute)).To(Succeed())
	sc.CatchUp(0)
	sc.Freeze(0, "Pod") // replica 0 never sees a
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())

	sc.Start(1, "db")
	g.Expect(sc.RunUntil(1, "db", "status patch")).To(BeTrue(), "replica 1 grants a and records it")
	g.Expect(sc.RunUntil(1, "db", "r1 patch Pod ns/a")).To(BeTrue(), "a's first grant is confirmed current; its publication waits")
	g.Expect(status(g, sc, "db").Holder.PodName).To(Equal("a"))
	g.Expect(sc.Holders("db")).To(BeEmpty())

	holds(g, sc, "b")

	sc.Finish(1, "db")
	g.Expect(sc.Holders("db")).To(Equal([]string{"b"}))
}

// TestAPodMovedToAnotherFencedLeaseKeepsNoStalePublication: pod p, db's
// published holder, moves to FencedLease other (its labels change). db
// revokes its grant and its demotion of p fails. other grants p; its
// publication fails after its pass over the pods wrote p. db is deleted
// and created again, and grants q. Had other's pass written its label
// alone over db's annotations (seed 3557), db's deletion, which finds its
// pods by the label, would have left p published as db's holder, and the
// new db's publication of q would make two (docs/design.md, "Once
// other's grant is seen ended").
func TestAPodMovedToAnotherFencedLeaseKeepsNoStalePublication(t *testing.T) {
	sc, g := script(t, 1)
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("p", "n0", app, time.Hour)).To(Succeed())
	holds(g, sc, "p")

	g.Expect(sc.Relabel("p", "app", "")).To(Succeed())
	g.Expect(sc.Relabel("p", "team", "x")).To(Succeed())
	for i := 0; i < 5 && lease(g, sc, "db").Annotations[fencingv1alpha1.LeaseAnnotationState] != "revoked"; i++ {
		sc.Start(0, "db")
		for sc.RunUntil(0, "db", "r0 patch Pod ns/p") {
			sc.Fail(0, "db") // the demotion, and its retries
		}
	}
	g.Expect(lease(g, sc, "db").Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationState, "revoked"))
	g.Expect(sc.Holders("db")).To(Equal([]string{"p"}), "db's demotion of p failed")

	g.Expect(sc.FencedLease("other", map[string]string{"team": "x"}, immediate)).To(Succeed())
	sc.Start(0, "other")
	g.Expect(sc.RunUntil(0, "other", "r0 patch Pod ns/p")).To(BeTrue(), "other's pass over the pods writes p")
	sc.Step(0, "other")
	g.Expect(sc.RunUntil(0, "other", "r0 patch Pod ns/p")).To(BeTrue(), "other publishes p")
	sc.Fail(0, "other")
	sc.Finish(0, "other")
	g.Expect(status(g, sc, "other").Holder.PodName).To(Equal("p"))

	g.Expect(sc.DeleteFencedLease("db")).To(Succeed())
	sc.Settle(0, "db", 10)
	g.Expect(sc.Get("db", &fencingv1alpha1.FencedLease{})).NotTo(Succeed(), "db is gone")
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("q", "n1", app, time.Minute)).To(Succeed())
	holds(g, sc, "q")
}
