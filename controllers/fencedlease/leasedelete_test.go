package fencedlease_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// A deleted Lease is the record of a grant that may still be in use: its
// finalizer keeps it while the grant is revoked and, under takeover Safe,
// until it expired on the operator's clock. Only then is it let go and
// re-created, and a new grant made with a higher fence.
func TestDeletedLeaseEndsItsGrantBeforeItGoes(t *testing.T) {
	f := newFixture(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 20 })
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, fence := f.waitHolder("db")
	old := f.lease("db")
	f.g.Expect(old.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))

	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(old), l)).To(Succeed())
		g.Expect(l.DeletionTimestamp).NotTo(BeNil())
		g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("revoked"))
		g.Expect(f.holders()).To(BeEmpty())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// Events are sent by the recorder after the writes that cause them:
	// the Lost Event may land after the Lease and the pods show the end.
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).WithPolling(poll).Should(ContainElement(fencingv1alpha1.EventLost))

	clock.SetTime(clock.Now().Add(19 * time.Second))
	f.poke("db")
	f.g.Consistently(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(old), l)).To(Succeed())
		g.Expect(l.UID).To(Equal(old.UID), "the deleted Lease stays until its grant expired")
		g.Expect(f.holders()).To(BeEmpty())
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())

	clock.SetTime(clock.Now().Add(2 * time.Second))
	f.poke("db")
	_, next := f.waitNewHolder("db", fence)
	l := f.lease("db")
	f.g.Expect(l.UID).NotTo(Equal(old.UID), "re-created")
	f.g.Expect(l.DeletionTimestamp).To(BeNil())
	f.g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	f.g.Expect(ptr.Deref(l.Spec.LeaseTransitions, 0)).To(Equal(ptr.Deref(old.Spec.LeaseTransitions, 0)+1), "the count goes on")
	f.g.Expect(next).To(BeNumerically(">", fence))
}

// A FencedLease whose finalizer was removed by hand while no operator ran
// leaves its Lease to the garbage collector, and the Lease's finalizer holds
// it. The next operator lets it go once the API server confirms that the
// FencedLease is gone.
func TestLeaseOfAGoneFencedLeaseIsLetGo(t *testing.T) {
	f := newFixture(t)
	m := f.startManager(testenv.ManagerOptions{})
	fl := f.fencedLease("db", nil)
	f.readyPod("a", time.Hour)
	f.waitHolder("db")
	m.Crash()
	m.Wait()

	f.g.Expect(f.c.Delete(f.ctx, fl)).To(Succeed())
	live := f.get("db")
	base := live.DeepCopy()
	live.Finalizers = nil
	f.g.Expect(f.c.Patch(f.ctx, live, client.MergeFrom(base))).To(Succeed())
	key := types.NamespacedName{Namespace: f.ns, Name: "db"}
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, key, &fencingv1alpha1.FencedLease{}))
	}).WithTimeout(timeout).Should(BeTrue())
	// As the garbage collector would.
	f.g.Expect(f.c.Delete(f.ctx, f.lease("db"))).To(Succeed())
	f.g.Consistently(func() error {
		return f.c.Get(f.ctx, key, &coordinationv1.Lease{})
	}).WithTimeout(time.Second).Should(Succeed(), "held by its finalizer while no operator runs")

	f.startManager(testenv.ManagerOptions{})
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, key, &coordinationv1.Lease{}))
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue())
}
