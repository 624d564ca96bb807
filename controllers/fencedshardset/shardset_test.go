package fencedshardset_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// Three pods share twelve shards, four each, each shard with a fence of
// its own on its Lease and in its owner's annotation. When a pod is
// deleted its four shards, and only those, move to the two others, each
// with a higher fence (Immediate).
func TestShardsSpreadAndMoveWithHigherFences(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	f.readyPod("b")
	c := f.readyPod("c")
	f.shardSet("work", nil)

	var before map[string]map[string]int64
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(12))
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 4, "b": 4, "c": 4}))
		before = byPod
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Eventually(func(g Gomega) {
		st := f.get("work").Status
		g.Expect(st.Owned).To(Equal(int32(12)))
		g.Expect(st.Pods).To(Equal(int32(3)))
		g.Expect(meta.IsStatusConditionTrue(st.Conditions, fencingv1alpha1.ConditionReady)).To(BeTrue())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	f.g.Expect(f.c.Delete(f.ctx, c, client.GracePeriodSeconds(0))).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 6, "b": 6}))
		for key, fence := range before["c"] {
			g.Expect(fences[key]).To(BeNumerically(">", fence), "shard %s moved without a higher fence", key)
		}
		for _, kept := range []string{"a", "b"} {
			for key, fence := range before[kept] {
				g.Expect(byPod[kept]).To(HaveKeyWithValue(key, fence), "shard %s of a live pod moved", key)
			}
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Eventually(func() int64 { return f.get("work").Status.Moves }).WithTimeout(timeout).Should(Equal(int64(16)))
}

// Under Safe a shard whose owner stops being ready is taken from the
// owner's annotation at once, and granted to another pod only once its
// revoked grant is a lease duration old.
func TestSafeMoveWaitsOutTheLease(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	b := f.readyPod("b")
	f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) {
		s.Spec.Shards, s.Spec.Takeover, s.Spec.LeaseDurationSeconds = 4, fencingv1alpha1.TakeoverSafe, 3
	})
	var before map[string]map[string]int64
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 2, "b": 2}))
		before = byPod
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	lost := time.Now()
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, b)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(byPod).NotTo(HaveKey("b"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 4}))
		for key, fence := range before["b"] {
			g.Expect(fences[key]).To(BeNumerically(">", fence))
			l := &coordinationv1.Lease{}
			g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: record.ShardLeaseName("work", key)}, l)).To(Succeed())
			g.Expect(l.Spec.AcquireTime.Sub(lost)).To(BeNumerically(">=", 3*time.Second), "shard %s granted before its old owner's lease ran out", key)
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// A pod that joins takes its share, and the fewest shards move: eight
// shards over two pods, then three pods: two shards move.
func TestJoiningPodTakesItsShare(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	f.readyPod("b")
	f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 8 })
	var before map[string]int64
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 4, "b": 4}))
		before = fences
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.readyPod("c")
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(counts(byPod)).To(HaveKeyWithValue("c", 2))
		g.Expect(counts(byPod)).To(ConsistOf(3, 3, 2))
		moved := 0
		for key, fence := range fences {
			if fence != before[key] {
				moved++
			}
		}
		g.Expect(moved).To(Equal(2))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// A pod that two sets select owns shards of neither, and both sets say so
// by not counting it: a set created beside one whose shards the pod owns
// takes them from it.
func TestPodOfTwoSetsOwnsNothing(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	f.shardSet("one", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 2 })
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "one")
		g.Expect(byPod).To(HaveKeyWithValue("a", HaveLen(2)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.shardSet("two", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 2 })
	f.g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a"}, p)).To(Succeed())
		g.Expect(p.Annotations).NotTo(HaveKey(record.AnnotationShards))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Consistently(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a"}, p)).To(Succeed())
		g.Expect(p.Annotations).NotTo(HaveKey(record.AnnotationShards))
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())
	f.g.Eventually(func(g Gomega) {
		st := f.get("one").Status
		g.Expect(st.Pods).To(BeZero())
		g.Expect(meta.FindStatusCondition(st.Conditions, fencingv1alpha1.ConditionReady)).To(HaveField("Reason", fencingv1alpha1.ReasonNoCandidates))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// Deleting the set takes its shards from the pods: no pod goes on
// believing it owns a shard of a set that is gone.
func TestDeletedSetLeavesNoShards(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	set := f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Keys, s.Spec.Shards = []string{"eu", "us"}, 0 })
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(byPod).To(HaveKeyWithValue("a", HaveLen(2)))
		g.Expect(slicesOf(byPod["a"])).To(ConsistOf("eu", "us"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Expect(f.c.Delete(f.ctx, set)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a"}, p)).To(Succeed())
		g.Expect(p.Annotations).NotTo(HaveKey(record.AnnotationShards))
		g.Expect(p.Labels).NotTo(HaveKey(record.LabelShardSet))
		err := f.c.Get(f.ctx, client.ObjectKeyFromObject(set), &fencingv1alpha1.FencedShardSet{})
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		g.Expect(err).To(HaveOccurred())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

func slicesOf(m map[string]int64) []string {
	out := []string{}
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// The API refuses a set it cannot act on, and says why.
func TestInvalidSetsAreRefused(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name   string
		mutate func(*fencingv1alpha1.FencedShardSet)
		says   string
	}{
		{"both a count and keys", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Keys = []string{"eu"} }, "set exactly one of shards"},
		{"neither", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 0 }, "set exactly one of shards"},
		{"a key that is not a DNS label", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards, s.Spec.Keys = 0, []string{"EU_west"} }, "spec.keys[0]"},
		{"too many shards", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 10001 }, "spec.shards"},
		{"renewal by the holder", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Renewal = fencingv1alpha1.RenewalHolder }, "spec.renewal"},
		{"an empty selector", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Selector.MatchLabels = nil }, "selector must not be empty"},
		{"a name too long for a label value", func(s *fencingv1alpha1.FencedShardSet) { s.Name = "bad-" + strings.Repeat("x", 60) }, "metadata.name: at most 63 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			set := &fencingv1alpha1.FencedShardSet{}
			set.Namespace, set.Name = f.ns, "bad"
			set.Spec.Selector.MatchLabels, set.Spec.Shards, set.Spec.MaxMovesPerInterval = workers, 4, ptr.To[int32](10)
			tc.mutate(set)
			err := f.c.Create(f.ctx, set)
			g.Expect(err).To(MatchError(ContainSubstring(tc.says)))
			g.Expect(err).To(MatchError(ContainSubstring(`FencedShardSet.fencing.fencedlease.io "` + set.Name + `" is invalid`)))
		})
	}
}

// A set that shrinks takes the shards it no longer has from the pods, then
// deletes their Leases; of the shards it keeps, at most the one that
// restores balance moves.
func TestShrunkSetLetsItsOldShardsGo(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	f.readyPod("b")
	set := f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 4 })
	var before map[string]int64
	f.g.Eventually(func(g Gomega) {
		_, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(4))
		before = fences
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(set), set)).To(Succeed())
	base := set.DeepCopy()
	set.Spec.Shards = 2
	f.g.Expect(f.c.Patch(f.ctx, set, client.MergeFrom(base))).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(2))
		g.Expect(fences).To(HaveKey("0"))
		g.Expect(fences).To(HaveKey("1"))
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 1, "b": 1}))
		if fences["0"] != before["0"] {
			g.Expect(fences["1"]).To(Equal(before["1"]), "both kept shards moved")
		}
		for _, key := range []string{"2", "3"} {
			err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: record.ShardLeaseName("work", key)}, &coordinationv1.Lease{})
			g.Expect(err).To(HaveOccurred())
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		}
		g.Expect(f.get("work").Status.Shards).To(Equal(int32(2)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// A pod whose node is lost gives its shards up; when the node is found
// again (the pod itself unchanged) the pod takes its share back.
func TestPodOfARecoveredNodeTakesItsShareBack(t *testing.T) {
	f := newFixture(t)
	node := "node-" + f.ns
	for _, name := range []string{"a", "b"} {
		pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: workers, Node: map[string]string{"a": node, "b": "node-1"}[name]})
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	}
	f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 4 })
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 2, "b": 2}))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Expect(testenv.SetNodeLost(f.ctx, f.c, node)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"b": 4}))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Expect(testenv.SetNodeReady(f.ctx, f.c, node)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(counts(byPod)).To(Equal(map[string]int{"a": 2, "b": 2}))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// Set "a" with key "b-c" and set "a-b" with key "c" both want Lease "a-b-c".
// The set that created it keeps it; the other never grants that shard, says
// so in its Degraded condition, and grants its other shards as usual.
func TestCollidingLeaseNamesAreAConflict(t *testing.T) {
	f := newFixture(t)
	f.readyPod("w")
	f.shardSet("a-b", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards, s.Spec.Keys = 0, []string{"c"} })
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "a-b")
		g.Expect(byPod).To(HaveKeyWithValue("w", HaveKey("c")))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	others := map[string]string{"app": "other"}
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: "p", Labels: others})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	f.shardSet("a", func(s *fencingv1alpha1.FencedShardSet) {
		s.Spec.Selector.MatchLabels, s.Spec.Shards, s.Spec.Keys = others, 0, []string{"b-c", "x"}
	})
	f.g.Eventually(func(g Gomega) {
		st := f.get("a").Status
		g.Expect(meta.FindStatusCondition(st.Conditions, fencingv1alpha1.ConditionDegraded)).To(And(
			HaveField("Reason", fencingv1alpha1.ReasonLeaseConflict), HaveField("Message", ContainSubstring("a-b-c"))))
		g.Expect(st.Owned).To(BeEquivalentTo(1))
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "p"}, p)).To(Succeed())
		shards, err := record.ParseShards(p.Annotations[record.AnnotationShards])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(shards).To(HaveLen(1))
		g.Expect(shards).To(HaveKey("x"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Consistently(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "w"}, p)).To(Succeed())
		g.Expect(p.Annotations).To(HaveKeyWithValue(record.AnnotationShards, ContainSubstring(`"c"`)), "set a-b keeps shard c")
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a-b-c"}, l)).To(Succeed())
		g.Expect(l.Labels).To(HaveKeyWithValue(record.LabelShardSet, "a-b"), "set a-b keeps its Lease")
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())
}

// Under Safe a shard the set no longer has is revoked first, and its Lease
// deleted only once the revocation is a lease duration old: a shard added
// back within that time, whichever pod gets it, is granted only after it,
// as after a move. Before, its Lease was deleted at once, and a shard added
// back (or brought back by a replica that had not seen the shrink) was
// granted at once while its old owner could still believe it held it.
func TestShrunkSafeSetRevokesBeforeItDeletes(t *testing.T) {
	f := newFixture(t)
	f.readyPod("a")
	f.readyPod("b")
	set := f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) {
		s.Spec.Shards, s.Spec.Takeover, s.Spec.LeaseDurationSeconds = 4, fencingv1alpha1.TakeoverSafe, 3
	})
	var before map[string]int64
	f.g.Eventually(func(g Gomega) {
		_, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(4))
		before = fences
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	resize := func(n int32) {
		f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(set), set)).To(Succeed())
		base := set.DeepCopy()
		set.Spec.Shards = n
		f.g.Expect(f.c.Patch(f.ctx, set, client.MergeFrom(base))).To(Succeed())
	}
	lease := func(g Gomega, key string) (*coordinationv1.Lease, error) {
		l := &coordinationv1.Lease{}
		err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: record.ShardLeaseName("work", key)}, l)
		return l, err
	}

	shrunk := time.Now()
	resize(2)
	f.g.Eventually(func(g Gomega) {
		_, fences := f.owners(g, "work")
		g.Expect(fences).NotTo(HaveKey("2"), "the removed shards are taken from the pods at once")
		g.Expect(fences).NotTo(HaveKey("3"), "the removed shards are taken from the pods at once")
		for _, key := range []string{"2", "3"} {
			l, err := lease(g, key)
			g.Expect(err).NotTo(HaveOccurred(), "shard %s's Lease stays while its revocation is younger than the lease", key)
			g.Expect(record.ParseLease(l.Annotations).State).To(Equal(record.StateRevoked))
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Expect(time.Since(shrunk)).To(BeNumerically("<", 3*time.Second), "checked within the wait")

	// Added back within the wait: granted only after it.
	resize(4)
	f.g.Eventually(func(g Gomega) {
		_, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(4))
		for _, key := range []string{"2", "3"} {
			g.Expect(fences[key]).To(BeNumerically(">", before[key]))
			l, err := lease(g, key)
			g.Expect(err).NotTo(HaveOccurred())
			// renewTime: the grant's write (acquireTime stays when the
			// same pod is granted again); a quiet shard is not written
			// after its commit.
			g.Expect(l.Spec.RenewTime.Sub(shrunk)).To(BeNumerically(">=", 3*time.Second),
				"shard %s granted again before its revoked grant's lease ran out", key)
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Removed for good: the Leases go once the wait is over.
	resize(2)
	f.g.Eventually(func(g Gomega) {
		for _, key := range []string{"2", "3"} {
			_, err := lease(g, key)
			g.Expect(err).To(HaveOccurred())
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}
