package fencedlease_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestAGrantFoundExpiredIsRegrantedAndHoldsBackFirstGrants: the operator's
// clock passes a grant's lease duration with no renewal confirmed (as the
// clock of an operator that was paused, or could not reach its API server).
// It finds the grant expired and re-grants it, behind the renewals of the
// other grants (expiry.go), to the same pod with a higher fence: exactly one
// new grant. For the next 20 s of its clock it admits no first grant: a
// FencedLease created then waits, with nothing written but its status, and
// is granted once the clock has passed the cooldown.
func TestAGrantFoundExpiredIsRegrantedAndHoldsBackFirstGrants(t *testing.T) {
	f := newFixture(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 60 })
	f.readyPod("a", time.Hour)
	_, fence := f.waitHolder("db")
	transitions := ptr.Deref(f.lease("db").Spec.LeaseTransitions, 0)

	clock.SetTime(clock.Now().Add(61 * time.Second))
	f.poke("db")
	pod, next := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("a"), "the same pod, still the best candidate")
	f.g.Expect(next).To(BeNumerically(">", fence))
	f.g.Expect(ptr.Deref(f.lease("db").Spec.LeaseTransitions, 0)).To(Equal(transitions+1), "one re-grant")
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventLost), "Events are recorded asynchronously")

	other := map[string]string{"app": "other"}
	f.readyPodWith("o", time.Hour, other)
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, "other", other, nil))).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		c := meta.FindStatusCondition(f.get("other").Status.Conditions, fencingv1alpha1.ConditionHeld)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(fencingv1alpha1.ReasonWaitingForCapacity))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Consistently(func(g Gomega) {
		g.Expect(f.get("other").Finalizers).To(BeEmpty())
		err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "other"}, f.lease0())
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Lease for a FencedLease that waits: %v", err)
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())

	clock.SetTime(clock.Now().Add(21 * time.Second))
	f.poke("other")
	f.waitHolder("other")
	f.g.Expect(f.get("db").Status.Fence).To(Equal(next), "the re-granted grant is renewed, not granted again")
}
