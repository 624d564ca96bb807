package fencedlease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// trap fires once, after a chosen write of the operator has been applied by
// the API server: it records the resourceVersion the write produced and then
// runs an action (lose the response, crash the operator).
type trap struct {
	mu    sync.Mutex
	armed bool
	step  string
	fired chan string // the resourceVersion the trapped write produced
	after func() error
}

func newTrap(step string, after func() error) *trap {
	return &trap{step: step, fired: make(chan string, 1), after: after}
}

func (tr *trap) arm() { tr.mu.Lock(); tr.armed = true; tr.mu.Unlock() }

// stepOf names the grant step a write belongs to.
func stepOf(obj client.Object, subresource string) string {
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		return "lease:" + o.Annotations[fencingv1alpha1.LeaseAnnotationState]
	case *corev1.Pod:
		if subresource != "" {
			return "pod-status"
		}
		return "pod:" + o.Annotations[fencingv1alpha1.AnnotationRole]
	case *metav1.PartialObjectMetadata:
		return "pod:" + o.Annotations[fencingv1alpha1.AnnotationRole]
	case *fencingv1alpha1.FencedLease:
		if subresource == "status" && o.Status.Holder != nil {
			return "status:holder"
		}
	}
	return ""
}

func (tr *trap) check(obj client.Object, subresource string) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.armed || stepOf(obj, subresource) != tr.step {
		return nil
	}
	tr.armed = false
	tr.fired <- obj.GetResourceVersion()
	return tr.after()
}

func (tr *trap) wrap(c client.Client) client.Client {
	return testenv.Intercept(c, interceptor.Funcs{
		// A first grant creates its Lease with the grant.
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := cl.Create(ctx, obj, opts...); err != nil {
				return err
			}
			return tr.check(obj, "")
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := cl.Update(ctx, obj, opts...); err != nil {
				return err
			}
			return tr.check(obj, "")
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			return tr.check(obj, "")
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			return tr.check(obj, sub)
		},
	})
}

func TestLostResponseOnGrantNeverMakesTwoHolders(t *testing.T) {
	f := newFixture(t)
	tr := newTrap("lease:pending", func() error {
		return apierrors.NewTimeoutError("the response to the grant was lost", 1)
	})
	tr.arm()
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: tr.wrap, PendingGrace: 500 * time.Millisecond}})
	f.fencedLease("db", nil)
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)

	var lost string
	f.g.Eventually(tr.fired).WithTimeout(timeout).Should(Receive(&lost))
	lostFence, err := record.ParseFence(lost)
	f.g.Expect(err).NotTo(HaveOccurred())

	// The grant whose response was lost is superseded by a fresh one.
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	f.g.Expect(fence).To(BeNumerically(">", lostFence))
	f.g.Expect(f.checker.Published()).NotTo(ContainElement(lostFence), "a grant with an unknown outcome was published")
	f.g.Expect(f.holders()).To(Equal([]string{"a"}))
	f.g.Expect(f.get("db").Status.Transitions).To(Equal(int32(2)))
}

// The steps of a handoff, in order: demote the old holder, write the grant,
// commit its fence, record it in the status, publish it to the new holder.
var grantSteps = []string{"pod:standby", "lease:pending", "lease:held", "status:holder", "pod:holder"}

func TestOperatorCrashBetweenGrantSteps(t *testing.T) {
	for _, step := range grantSteps {
		t.Run("after "+step, func(t *testing.T) {
			f := newFixture(t)
			var first *testenv.Manager
			tr := newTrap(step, func() error {
				first.Crash()
				return context.Canceled
			})
			first = f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: tr.wrap, PendingGrace: 500 * time.Millisecond}})
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
				fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
				fl.Spec.LeaseDurationSeconds = 600
			})
			a := f.readyPod("a", time.Hour)
			f.readyPod("b", time.Minute)
			_, fence := f.waitHolder("db")

			tr.arm()
			f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
			var rv string
			f.g.Eventually(tr.fired).WithTimeout(timeout).Should(Receive(&rv))
			first.Wait()

			// A new operator knows nothing but what is stored.
			f.startManager(testenv.ManagerOptions{Options: setup.Options{PendingGrace: 500 * time.Millisecond}})
			pod, next := f.waitNewHolder("db", fence)
			f.g.Expect(pod).To(Equal("b"))
			f.g.Expect(f.holders()).To(Equal([]string{"b"}))
			if step == "lease:pending" {
				pending := record.FenceOf(rv)
				f.g.Expect(next).To(BeNumerically(">", pending), "the uncommitted grant must be superseded")
				f.g.Expect(f.checker.Published()).NotTo(ContainElement(pending))
			}
		})
	}
}

func TestOperatorRestartWaitsAFullLeaseDurationInSafeMode(t *testing.T) {
	f := newFixture(t)
	var first *testenv.Manager
	tr := newTrap("lease:revoked", func() error { first.Crash(); return context.Canceled })
	first = f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: tr.wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 30 })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")

	tr.arm()
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(tr.fired).WithTimeout(timeout).Should(Receive())
	first.Wait()

	// The new operator has never seen a renewal: the revoked grant counts as
	// freshly renewed and blocks a full lease duration on its clock.
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock}})
	f.g.Eventually(f.holders).WithTimeout(timeout).Should(BeEmpty(), "the new operator demotes the old holder")
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(BeEmpty())
	clock.SetTime(clock.Now().Add(29 * time.Second))
	f.poke("db")
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(BeEmpty())
	clock.SetTime(clock.Now().Add(2 * time.Second))
	f.poke("db")
	pod, _ := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
}

func TestFenceIncreasesAcrossLeaseAndFencedLeaseRecreation(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	immediate := func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate }
	f.fencedLease("db", immediate)
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")

	// The Lease is deleted behind the operator's back.
	f.g.Expect(f.c.Delete(f.ctx, f.lease("db"))).To(Succeed())
	_, second := f.waitNewHolder("db", first)

	// The FencedLease is deleted and created again.
	f.g.Expect(f.c.Delete(f.ctx, f.get("db"))).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, &fencingv1alpha1.FencedLease{}))
	}).WithTimeout(timeout).Should(BeTrue())
	f.fencedLease("db", immediate)
	_, third := f.waitNewHolder("db", second)
	f.g.Expect(third).To(BeNumerically(">", second))
	f.g.Expect(second).To(BeNumerically(">", first))
	f.g.Expect(f.checker.Published()).To(HaveLen(3))
}

// leaseWrites counts the Lease writes of one operator that the API server
// accepted.
func leaseWrites(n *atomic.Int32) func(client.Client) client.Client {
	return func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				err := cl.Update(ctx, obj, opts...)
				if _, ok := obj.(*coordinationv1.Lease); ok && err == nil {
					n.Add(1)
				}
				return err
			},
		})
	}
}

func TestTwoOperatorsWithoutLeaderElectionKeepOneHolder(t *testing.T) {
	f := newFixture(t)
	var first, second atomic.Int32
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: leaseWrites(&first)}})
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: leaseWrites(&second)}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = 3
	})
	pods := map[string]*corev1.Pod{}
	for i, name := range []string{"a", "b", "c", "d"} {
		pods[name] = f.readyPod(name, time.Duration(10-i)*time.Minute)
	}
	var fence int64
	var pod string
	for i := 0; i < 3; i++ {
		pod, fence = f.waitNewHolder("db", fence)
		f.g.Expect(f.holders()).To(Equal([]string{pod}))
		f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, pods[pod])).To(Succeed())
	}
	pod, _ = f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("d"))
	// Both keep renewing the same grant for a while without a new one: a
	// renewal every second of a 3s lease, by whichever replica comes first.
	_, fence = f.waitHolder("db")
	f.g.Consistently(func() int64 { _, n := f.waitHolder("db"); return n }).WithTimeout(4 * time.Second).Should(Equal(fence))
	// Both replicas really took part: each wrote the Lease (grants, commits,
	// renewals), and neither broke an invariant (the fixture's checker).
	f.g.Expect(first.Load()).To(BeNumerically(">", 0), "replica 1 wrote no Lease")
	f.g.Expect(second.Load()).To(BeNumerically(">", 0), "replica 2 wrote no Lease")
}

func TestFenceRegressionRefusesToGrant(t *testing.T) {
	f := newFixture(t)
	m := f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")

	// The record says a fence far above anything the API server will hand
	// out, as after a restore of the API server's storage to an older state.
	fl := f.get("db")
	base := fl.DeepCopy()
	fl.Status.Fence = 9000000000000000000
	f.g.Expect(f.c.Status().Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
	// The operator decides from its cache: the holder dies once the cache
	// has the record, or the grant that follows would be judged against
	// the fence before it.
	f.g.Eventually(func(g Gomega) {
		seen := &fencingv1alpha1.FencedLease{}
		g.Expect(m.GetClient().Get(f.ctx, client.ObjectKeyFromObject(fl), seen)).To(Succeed())
		g.Expect(seen.Status.Fence).To(Equal(fl.Status.Fence))
	}).WithTimeout(timeout).Should(Succeed())

	// The holder dies: its grant ends, and nobody else is granted.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(func() string {
		c := meta.FindStatusCondition(f.get("db").Status.Conditions, fencingv1alpha1.ConditionDegraded)
		if c == nil || c.Status != metav1.ConditionTrue {
			return ""
		}
		return c.Reason + ": " + c.Message
	}).WithTimeout(timeout).Should(MatchRegexp(`^FenceRegression: new fence \d+ is not greater than fence 9000000000000000000 already published; no grant is made until it is$`))
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventFenceRegression))
	f.g.Eventually(f.holders).WithTimeout(timeout).Should(BeEmpty())
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(BeEmpty())
	f.g.Expect(f.get("db").Status.Holder).To(BeNil())
	// The grant to b is written and found below the floor after the write:
	// it stays pending, never committed (the check after the write is what
	// lets the operator grant once the store's revision has passed the
	// floor, test/restore).
	f.g.Expect(f.lease("db").Annotations[fencingv1alpha1.LeaseAnnotationState]).To(BeElementOf("revoked", "pending"))
	f.g.Expect(f.lease("db").Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(fence, 10)), "no new grant was committed")
	f.g.Expect(f.checker.Published()).To(Equal([]int64{fence}))
}

// TestPodWritesThatConflictAreLookedAtAgain: the API server answers the
// operator's first write to each pod, and its first two publications of the
// holder, with a conflict (the pod changed after it was read: the kubelet or
// another controller wrote it), and applies nothing. The standby's marking
// before the first publication wakes the operator through its watch; before
// the second, the standby is marked already, no watch event follows, and
// the next renewal is 100 s away: the operator looks again by itself, soon,
// and publishes the holder well within the test's 30 s.
func TestPodWritesThatConflictAreLookedAtAgain(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	refused := map[string]bool{}
	refuseOnce := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		first := !refused[key]
		refused[key] = true
		return first
	}
	wrap := func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				switch obj.(type) {
				case *corev1.Pod, *metav1.PartialObjectMetadata:
					data, err := patch.Data(obj)
					if err != nil {
						return err
					}
					publishes := strings.Contains(string(data), `"`+fencingv1alpha1.AnnotationRole+`":"`+fencingv1alpha1.RoleHolder+`"`)
					if refuseOnce(obj.GetName()) || (publishes && (refuseOnce("publication") || refuseOnce("publication again"))) {
						return apierrors.NewConflict(corev1.Resource("pods"), obj.GetName(), errors.New("the object has been modified"))
					}
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		})
	}
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 300 })
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	f.g.Eventually(func() string {
		role, _ := f.published("b")
		return role
	}).WithTimeout(timeout).WithPolling(poll).Should(Equal(fencingv1alpha1.RoleStandby))
	f.g.Expect(f.holders()).To(Equal([]string{"a"}))
	f.g.Expect(f.get("db").Status.Fence).To(Equal(fence))
	mu.Lock()
	defer mu.Unlock()
	f.g.Expect(refused).To(And(HaveKey("a"), HaveKey("b"), HaveKey("publication again")))
}
