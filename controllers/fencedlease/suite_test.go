package fencedlease_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

// fixture is one test's namespace, its operators and an invariant checker
// that fails the test if two pods are ever published as holder at once or a
// fence ever fails to increase.
type fixture struct {
	t       *testing.T
	g       Gomega
	ctx     context.Context
	ns      string
	c       client.Client
	checker *testenv.HolderChecker
}

func newFixture(t *testing.T) *fixture {
	harness.Needs(t, harness.ControlPlane)
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "fl")
	g.Expect(err).NotTo(HaveOccurred())
	checker, err := testenv.WatchHolders(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())
	f := &fixture{t: t, g: g, ctx: ctx, ns: ns, c: env.Client, checker: checker}
	t.Cleanup(func() {
		g.Expect(checker.Violations()).To(BeEmpty(), "invariants broken in namespace %s", ns)
	})
	return f
}

func (f *fixture) startManager(opts testenv.ManagerOptions) *testenv.Manager {
	f.t.Helper()
	opts.Namespace = f.ns
	m, err := testenv.StartManager(f.ctx, env.Config, opts)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.t.Cleanup(func() { m.Crash(); m.Wait() })
	return m
}

var appLabels = map[string]string{"app": "singleton"}

// readyPod creates a pod of the singleton app that has been ready for readyFor.
func (f *fixture) readyPod(name string, readyFor time.Duration) *corev1.Pod {
	f.t.Helper()
	return f.readyPodSince(name, time.Now().Add(-readyFor))
}

// readyPodSince creates a pod ready since that time (to the second, as the
// API server keeps it).
func (f *fixture) readyPodSince(name string, since time.Time) *corev1.Pod {
	f.t.Helper()
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: appLabels})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, since.Truncate(time.Second))).To(Succeed())
	return pod
}

// readyPodWith creates a ready pod with its own labels.
func (f *fixture) readyPodWith(name string, readyFor time.Duration, labels map[string]string) *corev1.Pod {
	f.t.Helper()
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: labels})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

func (f *fixture) fencedLease(name string, mutate func(*fencingv1alpha1.FencedLease)) *fencingv1alpha1.FencedLease {
	f.t.Helper()
	fl := testenv.FencedLease(f.ns, name, appLabels, mutate)
	f.g.Expect(f.c.Create(f.ctx, fl)).To(Succeed())
	return fl
}

func (f *fixture) get(name string) *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, fl)).To(Succeed())
	return fl
}

func (f *fixture) lease(name string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, l)).To(Succeed())
	return l
}

// published is what a pod carries: its role and fence annotations.
func (f *fixture) published(pod string) (string, string) {
	p := &corev1.Pod{}
	if err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: pod}, p); err != nil {
		return "gone", ""
	}
	return p.Annotations[fencingv1alpha1.AnnotationRole], p.Annotations[fencingv1alpha1.AnnotationFence]
}

// waitHolder waits until the FencedLease has a committed holder whose pod
// carries the fence, and returns them. The Lease records the same fence.
func (f *fixture) waitHolder(name string) (string, int64) {
	f.t.Helper()
	var pod string
	var fence int64
	key := types.NamespacedName{Namespace: f.ns, Name: name}
	f.g.Eventually(func(g Gomega) {
		// Inside Eventually every read goes through g: a Lease deleted and
		// not yet re-created is something to wait out, not a failure.
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(f.c.Get(f.ctx, key, fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(meta.IsStatusConditionTrue(fl.Status.Conditions, fencingv1alpha1.ConditionHeld)).To(BeTrue())
		pod, fence = fl.Status.Holder.PodName, fl.Status.Fence
		role, got := f.published(pod)
		g.Expect(role).To(Equal(fencingv1alpha1.RoleHolder))
		g.Expect(got).To(Equal(strconv.FormatInt(fence, 10)))
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, key, l)).To(Succeed())
		g.Expect(l.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(got))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return pod, fence
}

// waitNewHolder waits for a holder with a fence greater than after.
func (f *fixture) waitNewHolder(name string, after int64) (string, int64) {
	f.t.Helper()
	var pod string
	var fence int64
	f.g.Eventually(func() int64 {
		pod, fence = f.waitHolder(name)
		return fence
	}).WithTimeout(timeout).WithPolling(poll).Should(BeNumerically(">", after))
	return pod, fence
}

// holders lists the pods of the namespace published as holder.
func (f *fixture) holders() []string {
	var pods corev1.PodList
	f.g.Expect(f.c.List(f.ctx, &pods, client.InNamespace(f.ns))).To(Succeed())
	var out []string
	for _, p := range pods.Items {
		if p.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			out = append(out, p.Name)
		}
	}
	return out
}

// events lists the reasons of the Events recorded for a FencedLease.
func (f *fixture) events(name string) []string {
	var list eventsv1.EventList
	f.g.Expect(f.c.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "FencedLease" {
			out = append(out, e.Reason)
		}
	}
	return out
}

// poke makes the operator look at the FencedLease again (tests that move a
// fake clock need a reconcile to notice).
func (f *fixture) poke(name string) {
	fl := f.get(name)
	base := fl.DeepCopy()
	if fl.Annotations == nil {
		fl.Annotations = map[string]string{}
	}
	fl.Annotations["test.fencedlease.io/poke"] = time.Now().Format(time.RFC3339Nano)
	f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
}

// countBegins returns an interceptor Get that counts in begun the
// reconciles of the FencedLease name that an operator begins: its
// controller reads the FencedLease through its client first thing in a
// reconcile (controller.go), and nowhere else. Reads that the test makes
// itself do not go through the interceptor.
func countBegins(name string, begun *atomic.Int32) func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
	return func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && key.Name == name {
			begun.Add(1)
		}
		return cl.Get(ctx, key, obj, opts...)
	}
}

// reconciled pokes name until the operator whose reconciles begun counts
// (countBegins) has begun times+1 reconciles of it since the call: then the
// first times of them, which began after the call, have ended, with every
// write they made, for one FencedLease is never reconciled twice at once.
// Unlike a sleep, it cannot return before the operator has looked, however
// slow the machine.
func (f *fixture) reconciled(name string, begun *atomic.Int32, times int32) {
	f.t.Helper()
	start := begun.Load()
	f.g.Eventually(func() int32 {
		f.poke(name)
		return begun.Load() - start
	}).WithTimeout(timeout).WithPolling(200*time.Millisecond).Should(BeNumerically(">", times),
		"the operator did not reconcile %s %d times", name, times)
}

// advance moves a fake clock forward in steps shorter than the renew interval
// (6.7s) of a 20s lease, waiting after each step for the operator to have
// renewed recently, as real time would pass. The operator records a renewal
// when the API server confirms it; the clock may move between the write and
// the confirmation, which puts the operator's view up to one step after the
// Lease's renewTime (the safe direction for expiry) and delays its next
// renewal by that step. So "recently" is within the interval plus one step.
func (f *fixture) advance(clock *clocktesting.FakePassiveClock, name string, total time.Duration) {
	f.t.Helper()
	f.advanceBy(clock, name, total, 5*time.Second)
}

// advanceBy is advance in steps of step. Steps of a second keep the
// renewals on time as the pace measures them; steps of 5 s make each look
// up to 5 s late, which stretches renewals.
func (f *fixture) advanceBy(clock *clocktesting.FakePassiveClock, name string, total, step time.Duration) {
	f.t.Helper()
	for moved := time.Duration(0); moved < total; moved += step {
		clock.SetTime(clock.Now().Add(step))
		f.poke(name)
		due := clock.Now().Add(-12 * time.Second)
		f.g.Eventually(func() bool {
			l := f.lease(name)
			return l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Before(due)
		}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the operator did not renew at %s", clock.Now())
	}
}
