package fencedlease_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func TestTwoContendersStartTogether(t *testing.T) {
	f := newFixture(t)
	m := f.startManager(testenv.ManagerOptions{})
	// Both became ready at the same second: the tie is broken by name. They
	// are there, and in the operator's cache, before the FencedLease, so that
	// its first grant sees both: otherwise the first could be granted as a
	// lone candidate, before the cache has the second (the pods and the
	// FencedLease are watched apart, with no order between them).
	// One instant for both: computed apart, the two could fall on either
	// side of a second's boundary, and b would be ready longest.
	since := time.Now().Add(-time.Minute)
	f.readyPodSince("b", since)
	f.readyPodSince("a", since)
	f.g.Eventually(func() int { return readyInCache(f, m, "a", "b") }).WithTimeout(timeout).Should(Equal(2))
	f.fencedLease("db", nil)

	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	f.g.Eventually(func() []string { role, fence := f.published("b"); return []string{role, fence} }).
		WithTimeout(timeout).Should(Equal([]string{fencingv1alpha1.RoleStandby, ""}))
	f.g.Expect(f.holders()).To(Equal([]string{"a"}))

	l := f.lease("db")
	f.g.Expect(*l.Spec.HolderIdentity).To(Equal("a"))
	f.g.Expect(metav1IsControlledBy(l, f.get("db"))).To(BeTrue())
	fl := f.get("db")
	f.g.Expect(fl.Status.Candidates).To(Equal(int32(2)))
	f.g.Expect(fl.Status.Transitions).To(Equal(int32(1)))
	f.g.Expect(fl.Status.Fence).To(Equal(fence))
	f.g.Expect(meta.IsStatusConditionTrue(fl.Status.Conditions, fencingv1alpha1.ConditionReady)).To(BeTrue())
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventGranted))

	// The holder is kept while eligible, even when a pod ready for longer shows up.
	f.readyPod("c", time.Hour)
	f.g.Consistently(func() string { p, _ := f.waitHolder("db"); return p }).WithTimeout(2 * time.Second).Should(Equal("a"))
}

// readyInCache counts the named pods the manager's cache shows Ready.
func readyInCache(f *fixture, m *testenv.Manager, names ...string) int {
	n := 0
	for _, name := range names {
		pod := &corev1.Pod{}
		if err := m.GetCache().Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, pod); err != nil {
			continue
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// kill makes a pod ineligible in one of the ways a holder dies.
type kill struct {
	name string
	do   func(f *fixture, pod *corev1.Pod)
}

var kills = []kill{
	{"pod deleted", func(f *fixture, pod *corev1.Pod) {
		f.g.Expect(f.c.Delete(f.ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	}},
	{"containers not ready", func(f *fixture, pod *corev1.Pod) {
		f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, pod)).To(Succeed())
	}},
	{"phase Failed", func(f *fixture, pod *corev1.Pod) {
		f.g.Expect(testenv.SetFailed(f.ctx, f.c, pod)).To(Succeed())
	}},
}

func TestHolderDiesSafeTakeoverWaitsForExpiry(t *testing.T) {
	for _, k := range kills {
		t.Run(k.name, func(t *testing.T) {
			f := newFixture(t)
			clock := clocktesting.NewFakePassiveClock(time.Now())
			f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock}})
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 20 })
			a := f.readyPod("a", time.Hour)
			f.readyPod("b", time.Minute)
			_, fence := f.waitHolder("db")

			k.do(f, a)
			// The old holder is demoted at once; nobody is granted before the
			// grant expires on the operator's clock.
			f.g.Eventually(func() string {
				fl := f.get("db")
				c := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionHeld)
				return c.Reason
			}).WithTimeout(timeout).Should(Equal(fencingv1alpha1.ReasonWaitingForExpiry))
			f.g.Expect(f.holders()).To(BeEmpty())
			f.g.Expect(f.lease("db").Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("revoked"))
			clock.SetTime(clock.Now().Add(19 * time.Second))
			f.poke("db")
			f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(BeEmpty())

			clock.SetTime(clock.Now().Add(2 * time.Second))
			f.poke("db")
			pod, next := f.waitNewHolder("db", fence)
			f.g.Expect(pod).To(Equal("b"))
			f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElements(fencingv1alpha1.EventLost, fencingv1alpha1.EventGranted))
			f.g.Expect(next).To(BeNumerically(">", fence))
		})
	}
}

func TestHolderDiesImmediateTakeoverDoesNotWait(t *testing.T) {
	for _, k := range kills {
		t.Run(k.name, func(t *testing.T) {
			f := newFixture(t)
			f.startManager(testenv.ManagerOptions{})
			// A lease far longer than the test's patience: only an immediate
			// takeover can pass.
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
				fl.Spec.LeaseDurationSeconds = 600
				fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
			})
			a := f.readyPod("a", time.Hour)
			f.readyPod("b", time.Minute)
			_, fence := f.waitHolder("db")
			k.do(f, a)
			pod, next := f.waitNewHolder("db", fence)
			f.g.Expect(pod).To(Equal("b"))
			f.g.Expect(next).To(BeNumerically(">", fence))
			role, old := f.published("a")
			f.g.Expect(old).To(BeEmpty())
			f.g.Expect(role).To(BeElementOf(fencingv1alpha1.RoleStandby, "gone"))
		})
	}
}

func TestLateReleaseOfOldGrantCannotClearNewGrant(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")
	oldGrant := f.lease("db") // what the old grant's releaser holds

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	_, next := f.waitNewHolder("db", fence)

	// The late release: clear the holder, as of the old grant.
	release := oldGrant.DeepCopy()
	release.Spec.HolderIdentity = nil
	delete(release.Annotations, fencingv1alpha1.LeaseAnnotationHolderUID)
	err := f.c.Update(f.ctx, release)
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "late release must conflict, got %v", err)
	err = f.c.Delete(f.ctx, oldGrant.DeepCopy(), client.Preconditions{ResourceVersion: ptr.To(oldGrant.ResourceVersion)})
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "late delete must conflict, got %v", err)

	pod, still := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("b"))
	f.g.Expect(still).To(Equal(next))
	f.g.Expect(*f.lease("db").Spec.HolderIdentity).To(Equal("b"))
}

func TestMaxHoldRotatesTheHolder(t *testing.T) {
	f := newFixture(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 20
		fl.Spec.MaxHoldSeconds = 60
	})
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))

	f.advance(clock, "db", 55*time.Second)
	f.g.Expect(f.holders()).To(Equal([]string{"a"}))
	f.g.Expect(f.get("db").Status.Fence).To(Equal(fence), "renewals keep the same grant")

	clock.SetTime(clock.Now().Add(6 * time.Second))
	f.poke("db")
	f.g.Eventually(f.holders).WithTimeout(timeout).Should(BeEmpty())
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventRotated))

	// Safe takeover: the rotated grant must expire first.
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(BeEmpty())
	clock.SetTime(clock.Now().Add(21 * time.Second))
	f.poke("db")
	pod, next := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Expect(next).To(BeNumerically(">", fence))
}

func TestPausedKeepsTheHolderAndGrantsNothingNew(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 3
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")

	fl := f.get("db")
	base := fl.DeepCopy()
	fl.Spec.Paused = true
	f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())

	// The holder keeps its grant, renewed, across several lease durations.
	renewed := f.lease("db").Spec.RenewTime.Time
	f.g.Consistently(func() []string { return f.holders() }).WithTimeout(4 * time.Second).Should(Equal([]string{"a"}))
	f.g.Expect(f.lease("db").Spec.RenewTime.Time).To(BeTemporally(">", renewed))

	// It is still revoked when it dies, but nobody else is granted.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(f.holders).WithTimeout(timeout).Should(BeEmpty())
	f.g.Consistently(f.holders).WithTimeout(4 * time.Second).Should(BeEmpty())
	c := meta.FindStatusCondition(f.get("db").Status.Conditions, fencingv1alpha1.ConditionHeld)
	f.g.Expect(c.Reason).To(Equal(fencingv1alpha1.ReasonPaused))

	fl = f.get("db")
	base = fl.DeepCopy()
	fl.Spec.Paused = false
	f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
	pod, _ := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
}

func TestOverlappingSelectorsAreNeverGranted(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	shared, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: "shared",
		Labels: map[string]string{"app": "singleton", "team": "x"}})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, shared, time.Now().Add(-time.Hour))).To(Succeed())
	f.readyPod("own", time.Minute)
	f.fencedLease("one", nil)
	f.fencedLease("two", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Selector.MatchLabels = map[string]string{"team": "x"}
	})

	// "one" grants only its own pod, though "shared" is ready for longer;
	// "two" has only the shared pod and grants nobody.
	pod, _ := f.waitHolder("one")
	f.g.Expect(pod).To(Equal("own"))
	for _, name := range []string{"one", "two"} {
		f.g.Eventually(func() string {
			c := meta.FindStatusCondition(f.get(name).Status.Conditions, fencingv1alpha1.ConditionDegraded)
			if c == nil || c.Status != "True" {
				return ""
			}
			return c.Reason + ": " + c.Message
		}).WithTimeout(timeout).Should(HavePrefix(fencingv1alpha1.ReasonSelectorOverlap + ": some candidate pods are also selected by FencedLease"))
		f.g.Eventually(func() []string { return f.events(name) }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventSelectorOverlap))
	}
	f.g.Consistently(func() *fencingv1alpha1.HolderRef { return f.get("two").Status.Holder }).WithTimeout(2 * time.Second).Should(BeNil())
	f.g.Expect(f.holders()).To(Equal([]string{"own"}))
}

func TestDeletionReleasesEverything(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", nil)
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	f.waitHolder("db")
	f.g.Expect(f.get("db").Finalizers).To(ContainElement(fencingv1alpha1.Finalizer))

	f.g.Expect(f.c.Delete(f.ctx, f.get("db"))).To(Succeed())
	f.g.Eventually(func() bool {
		err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, &fencingv1alpha1.FencedLease{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).Should(BeTrue())
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, f.lease0())
	f.g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Lease must be deleted, got %v", err)
	for _, name := range []string{"a", "b"} {
		p := &corev1.Pod{}
		f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, p)).To(Succeed())
		f.g.Expect(p.Annotations).NotTo(HaveKey(fencingv1alpha1.AnnotationRole))
		f.g.Expect(p.Annotations).NotTo(HaveKey(fencingv1alpha1.AnnotationFence))
		f.g.Expect(p.Annotations).NotTo(HaveKey(fencingv1alpha1.AnnotationLease))
	}
}

func TestPodNoLongerSelectedLosesItsAnnotations(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")

	base := a.DeepCopy()
	a.Labels = map[string]string{"app": "something-else"}
	f.g.Expect(f.c.Patch(f.ctx, a, client.MergeFrom(base))).To(Succeed())
	pod, _ := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Eventually(func() map[string]string {
		p := &corev1.Pod{}
		f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(a), p)).To(Succeed())
		return p.Annotations
	}).WithTimeout(timeout).ShouldNot(HaveKey(fencingv1alpha1.AnnotationRole))
}
