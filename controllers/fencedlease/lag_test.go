package fencedlease_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// gate holds one chosen write of an operator before it reaches the API
// server, as a replica that pauses right before that write would, until the
// test releases it; then the write goes on and its result is kept.
type gate struct {
	match   func(obj client.Object, sub string, patch []byte) bool
	once    sync.Once
	reached chan struct{}
	release chan struct{}
	result  chan error
}

func newGate(match func(obj client.Object, sub string, patch []byte) bool) *gate {
	return &gate{match: match, reached: make(chan struct{}), release: make(chan struct{}), result: make(chan error, 1)}
}

func (g *gate) write(obj client.Object, sub string, patch client.Patch, do func() error) error {
	held := false
	if data, err := patch.Data(obj); err == nil && g.match(obj, sub, data) {
		g.once.Do(func() { held = true })
	}
	if !held {
		return do()
	}
	close(g.reached)
	<-g.release
	err := do()
	g.result <- err
	return err
}

func (g *gate) wrap(c client.Client) client.Client {
	return testenv.Intercept(c, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return g.write(obj, "", patch, func() error { return cl.Patch(ctx, obj, patch, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return g.write(obj, sub, patch, func() error { return cl.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
		// An update is matched on the whole object it writes.
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return g.write(obj, "", client.Merge, func() error { return cl.Update(ctx, obj, opts...) })
		},
	})
}

// TestPausedReplicaCannotPublishAnEndedGrant: replica 2 confirmed b's grant
// and pauses right before it publishes b. b stops being eligible without its
// pod changing (another FencedLease starts selecting it); replica 1 grants
// and publishes c. When replica 2 resumes, its publication of b must fail.
func TestPausedReplicaCannotPublishAnEndedGrant(t *testing.T) {
	f := newFixture(t)
	g := newGate(func(obj client.Object, _ string, patch []byte) bool {
		return obj.GetName() == "b" && bytes.Contains(patch, []byte(`"fencedlease.io/role":"holder"`))
	})
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: g.wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPodWith("b", 30*time.Minute, map[string]string{"app": "singleton", "team": "x"})
	f.readyPod("c", time.Minute)
	f.waitHolder("db")

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(g.reached).WithTimeout(timeout).Should(BeClosed(), "replica 2 reaches the publication of b")
	f.g.Expect(f.get("db").Status.Holder.PodName).To(Equal("b"))

	f.fencedLease("other", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Selector.MatchLabels = map[string]string{"team": "x"}
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	f.startManager(testenv.ManagerOptions{})
	pod, _ := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("c"))

	close(g.release)
	var err error
	f.g.Eventually(g.result).WithTimeout(timeout).Should(Receive(&err))
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the paused publication must fail its optimistic lock, got %v", err)
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(Equal([]string{"c"}))
}

// TestLateStatusPatchLoses: replica 2 grants b and pauses right before it
// records that in the status; meanwhile b fails too and replica 1 grants c
// and records it. Replica 2's late status patch must not move the status
// back to b.
func TestLateStatusPatchLoses(t *testing.T) {
	f := newFixture(t)
	g := newGate(func(obj client.Object, sub string, _ []byte) bool {
		fl, ok := obj.(*fencingv1alpha1.FencedLease)
		return ok && sub == "status" && fl.Status.Holder != nil && fl.Status.Holder.PodName == "b"
	})
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: g.wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", 30*time.Minute)
	f.readyPod("c", time.Minute)
	f.waitHolder("db")

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(g.reached).WithTimeout(timeout).Should(BeClosed(), "replica 2 reaches the status patch recording b")
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, b)).To(Succeed())
	f.startManager(testenv.ManagerOptions{})
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("c"))

	close(g.release)
	var err error
	f.g.Eventually(g.result).WithTimeout(timeout).Should(Receive(&err))
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the late status patch must fail, got %v", err)
	st := f.get("db").Status
	f.g.Expect(st.Holder.PodName).To(Equal("c"))
	f.g.Expect(st.Fence).To(Equal(fence))
}

// TestLaggingCachesNeverMoveTheStatusBack: replica 2's caches of Leases and
// FencedLeases stop while a holds the lease; replica 1 hands over to b.
// Replica 2 plans on its stale view, and its writes fail; then its
// FencedLease cache catches up (it shows b) while its Lease cache still
// shows a, as in the finding: it must write nothing at all. Throughout, the
// status never goes back.
func TestLaggingCachesNeverMoveTheStatusBack(t *testing.T) {
	f := newFixture(t)
	var lag *testenv.Lag
	var leaseConflicts, statusPatches, begun atomic.Int32
	wrap := func(c client.Client) client.Client {
		lag = testenv.NewLag(c)
		return testenv.Intercept(lag, interceptor.Funcs{
			Get: countBegins("db", &begun),
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				err := cl.Update(ctx, obj, opts...)
				if _, ok := obj.(*coordinationv1.Lease); ok && apierrors.IsConflict(err) {
					leaseConflicts.Add(1)
				}
				return err
			},
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*fencingv1alpha1.FencedLease); ok {
					statusPatches.Add(1)
				}
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	f.startManager(testenv.ManagerOptions{})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})

	// Replica 2's caches stop as soon as they show a holding the lease.
	f.g.Eventually(func(g Gomega) {
		g.Expect(lag.Freeze(f.ctx, &coordinationv1.LeaseList{})).To(Succeed())
		g.Expect(lag.Freeze(f.ctx, &fencingv1alpha1.FencedLeaseList{})).To(Succeed())
		l := &coordinationv1.Lease{}
		g.Expect(lag.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
		g.Expect(l.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(f.lease("db").Annotations[fencingv1alpha1.AnnotationFence]))
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(lag.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
		g.Expect(fl.Status.Fence).To(Equal(first))
	}).WithTimeout(timeout).Should(Succeed())

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	pod, second := f.waitNewHolder("db", first)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Eventually(leaseConflicts.Load).WithTimeout(timeout).Should(BeNumerically(">", 0), "replica 2 plans on the stale Lease")

	// The finding: FencedLease fresh (holder b), Lease stale (holder a).
	// Replica 2 finishes a reconcile begun on this view (whatever it began
	// before the thaw has ended by then), and three more that must write
	// nothing.
	lag.Thaw(&fencingv1alpha1.FencedLeaseList{})
	f.reconciled("db", &begun, 1)
	before := statusPatches.Load()
	f.reconciled("db", &begun, 3)
	f.g.Expect(statusPatches.Load()-before).To(BeZero(), "a reconcile whose Lease cache lags behind the status writes no status")
	st := f.get("db").Status
	f.g.Expect(st.Holder.PodName).To(Equal("b"))
	f.g.Expect(st.Fence).To(Equal(second))

	lag.Thaw(&coordinationv1.LeaseList{})
	f.g.Consistently(func() int64 { _, n := f.waitHolder("db"); return n }).WithTimeout(2 * time.Second).Should(Equal(second))
}
