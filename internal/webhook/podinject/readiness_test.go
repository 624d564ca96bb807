package podinject_test

import (
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestReadinessGateFollowsTheHolder runs the controller on two injected
// candidates of a FencedLease with readinessGate: only the holder becomes
// Ready, and the standby, never Ready, still takes over because eligibility
// uses ContainersReady.
func TestReadinessGateFollowsTheHolder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	checker, err := testenv.WatchHolders(f.ctx, env.Config, f.ns)
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { f.g.Expect(checker.Violations()).To(BeEmpty()) })
	m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns})
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })

	fl := f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.ReadinessGate = true
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	a, err := f.createPod("a", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	b, err := f.createPod("b", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []*corev1.Pod{a, b} {
		f.g.Expect(p.Spec.ReadinessGates).To(Equal([]corev1.PodReadinessGate{{ConditionType: fencingv1alpha1.ConditionHolder}}))
	}
	// a has been ready longer: it is chosen.
	f.g.Expect(testenv.SetReady(f.ctx, f.c, a, time.Now().Add(-time.Hour).Truncate(time.Second))).To(Succeed())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, b, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())

	fence := f.waitHolderCondition(fl, "a", "b", 0)
	f.g.Expect(f.conditions("a")).To(HaveKeyWithValue(corev1.PodReady, corev1.ConditionTrue))
	// The standby is not Ready but its containers are: it stays eligible.
	f.g.Expect(f.conditions("b")).To(And(
		HaveKeyWithValue(corev1.PodReady, corev1.ConditionFalse),
		HaveKeyWithValue(corev1.ContainersReady, corev1.ConditionTrue),
	))
	f.g.Expect(f.get(fl).Status.Candidates).To(Equal(int32(2)))

	// Handoff: the holder's containers fail their readiness probe.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	fence = f.waitHolderCondition(fl, "b", "a", fence)
	f.g.Expect(f.conditions("b")).To(HaveKeyWithValue(corev1.PodReady, corev1.ConditionTrue))
	f.g.Expect(f.conditions("a")).To(HaveKeyWithValue(corev1.PodReady, corev1.ConditionFalse))

	// The holder's pod is deleted (a rolling update): it stays, terminating,
	// for its grace period, and loses the lease at once. Its holder
	// condition turns False, so that it is not Ready while another pod holds.
	f.g.Expect(testenv.SetReady(f.ctx, f.c, f.pod("a"), time.Now().Add(-time.Hour).Truncate(time.Second))).To(Succeed())
	f.g.Expect(f.c.Delete(f.ctx, f.pod("b"))).To(Succeed())
	f.g.Expect(f.pod("b").DeletionTimestamp).NotTo(BeNil(), "the pod is terminating, not gone")
	f.waitHolderCondition(fl, "a", "b", fence)
	f.g.Expect(f.conditions("b")).To(HaveKeyWithValue(corev1.PodReady, corev1.ConditionFalse))
}

// waitHolderCondition waits until holder is published with a fence greater
// than after and has fencedlease.io/holder=True while standby has it False,
// then lets the kubelet (SyncReady) recompute Ready on both. It returns the
// holder's fence.
func (f *fixture) waitHolderCondition(fl *fencingv1alpha1.FencedLease, holder, standby string, after int64) int64 {
	f.t.Helper()
	var fence int64
	f.g.Eventually(func(g Gomega) {
		got := f.get(fl)
		g.Expect(got.Status.Holder).NotTo(BeNil())
		g.Expect(got.Status.Holder.PodName).To(Equal(holder))
		g.Expect(got.Status.Fence).To(BeNumerically(">", after))
		fence = got.Status.Fence
		h, s := f.pod(holder), f.pod(standby)
		g.Expect(h.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence, 10)))
		g.Expect(h.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleHolder))
		g.Expect(s.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleStandby))
		g.Expect(f.conditions(holder)).To(HaveKeyWithValue(corev1.PodConditionType(fencingv1alpha1.ConditionHolder), corev1.ConditionTrue))
		g.Expect(f.conditions(standby)).To(HaveKeyWithValue(corev1.PodConditionType(fencingv1alpha1.ConditionHolder), corev1.ConditionFalse))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	for _, name := range []string{holder, standby} {
		f.g.Expect(testenv.SyncReady(f.ctx, f.c, f.pod(name))).To(Succeed())
	}
	return fence
}

func (f *fixture) get(fl *fencingv1alpha1.FencedLease) *fencingv1alpha1.FencedLease {
	got := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(fl), got)).To(Succeed())
	return got
}

func (f *fixture) pod(name string) *corev1.Pod {
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, p)).To(Succeed())
	return p
}

// conditions maps a pod's condition types to their status.
func (f *fixture) conditions(name string) map[corev1.PodConditionType]corev1.ConditionStatus {
	out := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range f.pod(name).Status.Conditions {
		out[c.Type] = c.Status
	}
	return out
}
