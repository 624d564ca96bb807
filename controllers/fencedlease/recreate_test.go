package fencedlease_test

import (
	"bytes"
	"context"
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

// TestReplicaThatMissedARecreationClearsNothing: replica 2's FencedLease
// cache saw db deleted and never saw it created again. To replica 2, db is
// gone, so it looks for pods of db to clear; they are the pods of the new
// db, whose holder replica 1 has published. Replica 2 must not write them:
// the API server says that a FencedLease of that name exists.
func TestReplicaThatMissedARecreationClearsNothing(t *testing.T) {
	f := newFixture(t)
	var lag *testenv.Lag
	var clears, begun atomic.Int32
	wrap := func(c client.Client) client.Client {
		lag = testenv.NewLag(c)
		return testenv.Intercept(lag, interceptor.Funcs{
			Get: countBegins("db", &begun),
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if data, err := patch.Data(obj); err == nil && bytes.Contains(data, []byte(`"`+fencingv1alpha1.LabelLease+`":null`)) {
					clears.Add(1)
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		})
	}
	f.startManager(testenv.ManagerOptions{})
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")

	old := f.get("db")
	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		err := f.c.Get(f.ctx, client.ObjectKeyFromObject(old), &fencingv1alpha1.FencedLease{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		g.Expect(f.holders()).To(BeEmpty())
		list := &fencingv1alpha1.FencedLeaseList{}
		g.Expect(lag.List(f.ctx, list, client.InNamespace(f.ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "replica 2 has seen the deletion")
	}).WithTimeout(timeout).Should(Succeed())
	f.g.Expect(lag.Freeze(f.ctx, &fencingv1alpha1.FencedLeaseList{})).To(Succeed())
	before := clears.Load()

	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	holder, second := f.waitHolder("db")
	f.g.Expect(second).To(BeNumerically(">", first))
	// Replica 2 reconciles db three times, each time finding it gone in its
	// frozen cache.
	f.reconciled("db", &begun, 3)
	f.g.Expect(clears.Load()-before).To(BeZero(), "replica 2 cleared pods of the FencedLease created again")
	f.g.Expect(f.holders()).To(Equal([]string{holder}))
	_, fence := f.waitHolder("db")
	f.g.Expect(fence).To(Equal(second), "the holder kept its grant")
}

// finishesStaleDeletion runs the deletion of db on replica 2 until the write
// that gate holds, lets replica 1 finish that deletion and grant the
// FencedLease created again under the same name, and then lets replica 2's
// held write go on. It returns that write's result.
func finishesStaleDeletion(t *testing.T, g *gate) (*fixture, error) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: g.wrap}})
	immediate := func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate }
	f.fencedLease("db", immediate)
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")

	old := f.get("db")
	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	f.g.Eventually(g.reached).WithTimeout(timeout).Should(BeClosed(), "replica 2 reaches the held write of the deletion")
	f.startManager(testenv.ManagerOptions{})
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(old), &fencingv1alpha1.FencedLease{}))
	}).WithTimeout(timeout).Should(BeTrue(), "replica 1 finishes the deletion")
	f.fencedLease("db", immediate)
	_, second := f.waitHolder("db")
	f.g.Expect(second).To(BeNumerically(">", first))

	close(g.release)
	var err error
	f.g.Eventually(g.result).WithTimeout(timeout).Should(Receive(&err))
	return f, err
}

// TestPausedDeletionCannotTakeANewLeasesFinalizer: replica 2 deletes db and
// pauses right before it lets go of db's Lease, once its grant is over;
// replica 1 finishes the deletion, and db is created again and granted,
// with a new Lease. Replica 2's write, decided on the old Lease, must not
// take the new one's finalizer.
func TestPausedDeletionCannotTakeANewLeasesFinalizer(t *testing.T) {
	g := newGate(func(obj client.Object, _ string, data []byte) bool {
		l, ok := obj.(*coordinationv1.Lease)
		return ok && l.DeletionTimestamp != nil && !bytes.Contains(data, []byte(fencingv1alpha1.LeaseFinalizer))
	})
	f, err := finishesStaleDeletion(t, g)
	f.g.Expect(apierrors.IsConflict(err) || apierrors.IsInvalid(err)).To(BeTrue(), "the write on the old Lease must fail, got %v", err)
	f.g.Expect(f.lease("db").Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	f.g.Consistently(func() []string { return f.lease("db").Finalizers }).WithTimeout(2 * time.Second).
		Should(ContainElement(fencingv1alpha1.LeaseFinalizer))
}

// TestPausedDeletionCannotTakeANewFencedLeasesFinalizer: the same, with
// replica 2 paused right before it lets go of the FencedLease itself.
func TestPausedDeletionCannotTakeANewFencedLeasesFinalizer(t *testing.T) {
	g := newGate(func(obj client.Object, sub string, patch []byte) bool {
		fl, ok := obj.(*fencingv1alpha1.FencedLease)
		return ok && sub == "" && fl.DeletionTimestamp != nil && bytes.Contains(patch, []byte(`"finalizers"`))
	})
	f, err := finishesStaleDeletion(t, g)
	f.g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the patch on the old FencedLease's UID must fail, got %v", err)
	f.g.Expect(err).To(MatchError(ContainSubstring("metadata.uid")))
	f.g.Expect(f.get("db").Finalizers).To(ContainElement(fencingv1alpha1.Finalizer))
	f.g.Expect(f.get("db").DeletionTimestamp).To(BeNil())
}
